package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// TestRedrivePass: one pass re-publishes the old undecided entry (as the
// gateway would have, marked redriven), acks the old created one, leaves the
// rejected one to its compensation and the young one to the gateway, and
// backs off before re-publishing the same entry again.
func TestRedrivePass(t *testing.T) {
	db, r, k := testenv.MustDatabase(t), testenv.MustRedis(t), testenv.MustKafka(t)
	ctx := context.Background()
	topic := testenv.UniqueName("orders.requested.")
	if err := event.EnsureTopics(ctx, k.Brokers, 1, 0, topic); err != nil {
		t.Fatal(err)
	}
	orders, st := order.NewStore(db.Pool), stock.New(r.Client, r.Prefix)
	it := stock.Item{ActivityID: 5, ItemID: 6}
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := order.Activity{ID: 5, Name: "redrive", StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour), PerUserLimit: 1,
		Items: []order.ItemStock{{ItemID: 6, InitialStock: 10}}}
	if err := orders.UpsertActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: 10, StartsAt: a.StartsAt, EndsAt: a.EndsAt, Cap: 1}); err != nil {
		t.Fatal(err)
	}
	reserve := func(rid string, user int64, at time.Time) event.OrderRequested {
		t.Helper()
		ev := event.OrderRequested{RequestID: rid, OrderNo: fmt.Sprintf("5-6-%s", rid), UserID: user, ActivityID: 5, ItemID: 6,
			Quantity: 1, ReservedAt: at}
		res, err := st.Reserve(ctx, stock.Reservation{Item: it, RequestID: rid, OrderNo: ev.OrderNo, UserID: user, Quantity: 1,
			Fingerprint: rid, Event: ev.Marshal(), Now: now})
		if err != nil || res.Outcome != stock.Reserved {
			t.Fatalf("reserving %s: %v %v", rid, res.Outcome, err)
		}
		return ev
	}
	decide := func(ev event.OrderRequested) order.Decision {
		t.Helper()
		if _, err := st.Claim(ctx, it, []stock.Ref{{RequestID: ev.RequestID, OrderNo: ev.OrderNo}}); err != nil {
			t.Fatal(err)
		}
		ds, err := orders.ProcessBatch(ctx, []order.Request{{RequestID: ev.RequestID, OrderNo: ev.OrderNo, UserID: ev.UserID,
			ActivityID: 5, ItemID: 6, Quantity: 1, ReservedAt: ev.ReservedAt, Held: true}})
		if err != nil {
			t.Fatal(err)
		}
		return ds[0]
	}
	old := now.Add(-time.Minute)
	stranded := reserve("stranded", 1, old)
	created := reserve("created", 2, old)
	if d := decide(created); d.Outcome != order.Created {
		t.Fatalf("created decided %s", d.Outcome)
	}
	rejected := reserve("rejected", 3, old)
	if _, err := db.Pool.Exec(ctx, `UPDATE item_stock SET stock = 0`); err != nil {
		t.Fatal(err)
	}
	if d := decide(rejected); d.Outcome != order.Rejected {
		t.Fatalf("rejected decided %s", d.Outcome)
	}
	reserve("young", 4, now)

	writer := event.NewWriter(event.WriterConfig{Brokers: k.Brokers, Topic: topic})
	defer writer.Close()
	clock := now
	rd := NewRedriver(RedriveConfig{After: 30 * time.Second}, RedriveDeps{Orders: orders, Stock: st, Events: writer,
		Locker: lock.New(r.Client, r.Prefix), Metrics: telemetry.NewMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NowFunc: func() time.Time { return clock }})

	res, err := rd.runOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Republished != 1 || res.Acked != 1 || res.Rejected != 1 || res.Entries != 4 {
		t.Errorf("pass %+v; want 1 republished, 1 acked, 1 rejected of 4 entries", res)
	}
	journal := r.Client.HKeys(ctx, st.Keys(it).Journal).Val()
	if len(journal) != 3 || contains(journal, "created") {
		t.Errorf("journal after the pass %v; want it without the created entry", journal)
	}

	rdr := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Brokers, Topic: topic, Partition: 0, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond})
	defer rdr.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := rdr.ReadMessage(rctx)
	if err != nil {
		t.Fatalf("reading the re-published event: %v", err)
	}
	if string(m.Value) != string(stranded.Marshal()) || string(m.Key) != "5:6" {
		t.Errorf("re-published %s = %s; want %s", m.Key, m.Value, stranded.Marshal())
	}
	for h, want := range map[string]string{event.HeaderSchema: event.SchemaV1, event.HeaderRequestID: "stranded", HeaderRedriven: "1"} {
		if got := event.Header(m, h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
	if _, err := event.Decode(m.Value); err != nil {
		t.Errorf("re-published event does not validate: %v", err)
	}

	// The next pass backs off; once After has passed again it re-publishes.
	if res, err := rd.runOnce(ctx); err != nil || res.Republished != 0 {
		t.Errorf("immediate second pass %+v %v; want nothing re-published", res, err)
	}
	clock = clock.Add(31 * time.Second)
	if res, err := rd.runOnce(ctx); err != nil || res.Republished != 2 {
		t.Errorf("pass after the backoff %+v %v; want the stranded and the now old young entry", res, err)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
