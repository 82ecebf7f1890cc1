package worker

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// unsigned is the message of an event as a producer other than the gateway
// would write it: a valid value, keyed like the gateway's, no signature.
func unsigned(rid, orderNo string, user int64) kafka.Message {
	ev := event.OrderRequested{RequestID: rid, OrderNo: orderNo, UserID: user, ActivityID: 1, ItemID: 2, Quantity: 1,
		ReservedAt: time.Now().UTC()}
	return kafka.Message{Key: []byte(ev.Key()), Value: ev.Marshal()}
}

// TestForeignEventsChangeNothing: a valid event the gateway did not sign —
// made up, or a copy of a real one pointed at another requestId or orderNo —
// is dead-lettered and creates, releases and alters nothing, before or after
// the original; a signed one with no journal entry (Redis lost the
// reservation) is the order the gateway accepted.
func TestForeignEventsChangeNothing(t *testing.T) {
	t.Parallel()
	otherKey := func(m kafka.Message) kafka.Message {
		h := hmac.New(sha256.New, []byte("not this deployment's key"))
		h.Write(m.Value)
		m.Headers = append(m.Headers, kafka.Header{Key: event.HeaderSignature, Value: []byte("hmac-sha256=" + hex.EncodeToString(h.Sum(nil)))})
		return m
	}
	for _, tc := range []struct {
		name string
		// batches are processed in order; real is the reserved original
		// (user 3), when the case has one.
		batches  func(real kafka.Message) [][]kafka.Message
		reserved bool
		dead     int
	}{
		{name: "MadeUp", dead: 1, batches: func(kafka.Message) [][]kafka.Message {
			return [][]kafka.Message{{unsigned("fake", "1-2-fake", 9)}}
		}},
		{name: "SignedWithAnotherKey", dead: 1, batches: func(kafka.Message) [][]kafka.Message {
			return [][]kafka.Message{{otherKey(unsigned("fake", "1-2-fake", 9))}}
		}},
		{name: "RequestIDChangedBeforeTheOriginal", reserved: true, dead: 1, batches: func(real kafka.Message) [][]kafka.Message {
			return [][]kafka.Message{{unsigned("fake", "1-2-real", 9)}, {real}}
		}},
		{name: "OrderNoChangedBeforeTheOriginal", reserved: true, dead: 1, batches: func(real kafka.Message) [][]kafka.Message {
			return [][]kafka.Message{{unsigned("real", "1-2-fake", 9)}, {real}}
		}},
		{name: "BesideTheOriginal", reserved: true, dead: 2, batches: func(real kafka.Message) [][]kafka.Message {
			return [][]kafka.Message{{unsigned("fake", "1-2-real", 9), real, unsigned("real", "1-2-fake", 9)}}
		}},
		{name: "RequestIDChangedAfterTheAck", reserved: true, dead: 1, batches: func(real kafka.Message) [][]kafka.Message {
			return [][]kafka.Message{{real}, {unsigned("fake", "1-2-real", 9)}}
		}},
		{name: "OrderNoChangedAfterTheAck", reserved: true, dead: 1, batches: func(real kafka.Message) [][]kafka.Message {
			return [][]kafka.Message{{real}, {unsigned("real", "1-2-fake", 9)}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := mustFixture(t, 10)
			var real kafka.Message
			if tc.reserved {
				real = f.reserve(t, "real", 3)
			}
			for _, b := range tc.batches(real) {
				f.mustProcess(t, b...)
			}
			if len(f.dlq.msgs) != tc.dead {
				t.Errorf("%d dead letters, want %d", len(f.dlq.msgs), tc.dead)
			}
			for _, m := range f.dlq.msgs {
				if e := event.Header(m, event.HeaderError); e != event.ErrNotSigned.Error() {
					t.Errorf("dead letter's error %q, want %q", e, event.ErrNotSigned)
				}
			}
			snap := f.snapshot(t)
			want, stockLeft := 0, int64(10)
			if tc.reserved {
				want, stockLeft = 1, 9
			}
			if len(snap.Orders) != want {
				t.Fatalf("orders %+v, want %d", snap.Orders, want)
			}
			if want == 1 {
				if o := snap.Orders[0]; o.RequestID != "real" || o.OrderNo != "1-2-real" || o.UserID != 3 || o.Quantity != 1 || o.Status != order.StatusUnpaid {
					t.Errorf("order %+v, want real's as reserved", o)
				}
				if got := stocktest.MarkerOwner(t, f.sr, f.item, 3); got != "real" {
					t.Errorf("user 3's marker is %q, want real's", got)
				}
			}
			for _, d := range snap.Decisions {
				if d.RequestID != "real" || d.OrderNo != "1-2-real" || d.Outcome != order.Created {
					t.Errorf("decision %+v: only real's order may be recorded", d)
				}
			}
			if len(snap.Refused) != 0 {
				t.Errorf("refused %+v, want none", snap.Refused)
			}
			if n := len(ordertest.Compensations(t, f.db.Pool)); n != 0 {
				t.Errorf("%d compensations, want none", n)
			}
			f.assertStocks(t, stockLeft)
			if got := stocktest.MarkerOwner(t, f.sr, f.item, 9); got != "" {
				t.Errorf("user 9 holds a marker of %q", got)
			}
		})
	}
}

// TestSignedEventWithoutJournalEntryIsTheOrder: Redis lost a reservation
// (no journal entry, no fate), and the gateway's signed event is all that is
// left of the order it accepted: it becomes that order.
func TestSignedEventWithoutJournalEntryIsTheOrder(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	ev := event.OrderRequested{RequestID: "lost", OrderNo: "1-2-lost", UserID: 5, ActivityID: 1, ItemID: 2, Quantity: 1,
		ReservedAt: time.Now().UTC()}
	f.mustProcess(t, event.Message(context.Background(), ev))
	if n := f.countOrders(t, func(o order.SnapshotOrder) bool {
		return o.RequestID == "lost" && o.OrderNo == "1-2-lost" && o.UserID == 5 && o.Status == order.StatusUnpaid
	}); n != 1 {
		t.Errorf("%d orders of the lost reservation, want 1", n)
	}
	if len(f.dlq.msgs) != 0 {
		t.Errorf("%d dead letters, want none", len(f.dlq.msgs))
	}
}

// TestOrderNoPostgresRefusesDoesNotBlock: a valid-looking event whose
// orderNo holds a NUL, which Postgres's text refuses, is dead-lettered
// instead of failing its batch forever; the order beside it is made.
func TestOrderNoPostgresRefusesDoesNotBlock(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	good := f.reserve(t, "good", 4)
	ev := event.OrderRequested{RequestID: "nul", OrderNo: "1-2-\x00", UserID: 5, ActivityID: 1, ItemID: 2, Quantity: 1,
		ReservedAt: time.Now().UTC()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.w.ProcessBatch(ctx, []kafka.Message{event.Message(ctx, ev), good}); err != nil {
		t.Fatalf("the batch failed (it would be retried forever): %v", err)
	}
	if len(f.dlq.msgs) != 1 {
		t.Errorf("%d dead letters, want the NUL one", len(f.dlq.msgs))
	}
	if n := f.countOrders(t, func(o order.SnapshotOrder) bool { return o.RequestID == "good" }); n != 1 {
		t.Errorf("%d orders of good, want 1", n)
	}
}

// TestDeadLetterLogNamesTheRequest: a dead-lettered message without a
// request-id header is logged under the requestId its value names, so on
// call finds the line by that id (the dlq listing shows the same id).
func TestDeadLetterLogNamesTheRequest(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	var logs testenv.SyncBuffer
	w := New(Config{}, Deps{Orders: f.orders, Stock: f.stock, DLQ: f.dlq, Metrics: telemetry.NewMetrics(),
		Log: slog.New(telemetry.NewTraceHandler(slog.NewJSONHandler(&logs, nil)))})
	if err := w.ProcessBatch(context.Background(), []kafka.Message{unsigned("forged-1", "1-2-forged", 9)}); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "message dead-lettered") {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
		}
	}
	if line["request_id"] != "forged-1" || line["order_no"] != "1-2-forged" {
		t.Errorf("dead-letter line %v, want request_id forged-1 and order_no 1-2-forged; log:\n%s", line, logs.String())
	}
}
