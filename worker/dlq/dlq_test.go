package dlq

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/testenv"
)

func TestParsePosition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Position
		ok   bool
	}{
		{"0:0", Position{0, 0}, true},
		{"11:9000000000", Position{11, 9000000000}, true},
		{"3", Position{}, false},
		{"3:", Position{}, false},
		{":3", Position{}, false},
		{"-1:3", Position{}, false},
		{"1:-3", Position{}, false},
		{"a:b", Position{}, false},
		{"1:2:3", Position{}, false},
		{"2147483647:0", Position{2147483647, 0}, true},
		{"2147483648:0", Position{}, false},
	} {
		got, err := ParsePosition(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePosition(%q) = %v, %v", tc.in, got, err)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("%v prints as %q", got, got.String())
		}
	}
}

// signedBy is the signature header the gateway's message of value carries,
// which the worker keeps in the dead letter.
func signedBy(value []byte) kafka.Header {
	return kafka.Header{Key: event.HeaderSignature, Value: []byte(event.Signature(value))}
}

func validEvent(rid string) (event.OrderRequested, []byte) {
	ev := event.OrderRequested{RequestID: rid, OrderNo: "1-2-abc", UserID: 9, ActivityID: 1, ItemID: 2, Quantity: 1,
		ReservedAt: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	return ev, ev.Marshal()
}

// TestLetterOf: what a dead letter says about itself, from its headers and value.
func TestLetterOf(t *testing.T) {
	t.Parallel()
	_, valid := validEvent("r-1")
	l := letterOf(Position{2, 7}, time.Now(), []byte("1:2"), valid, []kafka.Header{
		{Key: "error", Value: []byte("a decoder bug")}, {Key: event.HeaderSourcePartition, Value: []byte("3")},
		{Key: event.HeaderSourceOffset, Value: []byte("42")}, {Key: event.HeaderOriginalSize, Value: []byte("151")},
		signedBy(valid),
	})
	if l.Error != "a decoder bug" || l.SourcePartition != 3 || l.SourceOffset != 42 || l.OriginalSize != 151 || l.Truncated ||
		l.RequestID != "r-1" || l.OrderNo != "1-2-abc" || l.Invalid != "" {
		t.Errorf("valid letter: %+v", l)
	}
	// A valid event the gateway did not sign is not its event: replaying it
	// would make it one.
	l = letterOf(Position{2, 8}, time.Now(), []byte("1:2"), valid, []kafka.Header{{Key: "error", Value: []byte("not signed")}})
	if !strings.Contains(l.Invalid, "EVENT_SIGNING_KEY") {
		t.Errorf("unsigned letter: %+v", l)
	}
	if _, err := l.Event(); err == nil {
		t.Error("an unsigned letter decoded")
	}
	// A valid prefix is still not the event sent: a truncated letter is never replayable.
	l = letterOf(Position{0, 1}, time.Now(), nil, valid, []kafka.Header{{Key: event.HeaderTruncated, Value: []byte("true")},
		{Key: event.HeaderHeadersDropped, Value: []byte("12")}})
	if !l.Truncated || l.HeadersDropped != 12 || !strings.Contains(l.Invalid, "truncated") || l.SourcePartition != -1 ||
		l.SourceOffset != -1 || l.OriginalSize != -1 {
		t.Errorf("truncated letter: %+v", l)
	}
	if _, err := l.Event(); err == nil {
		t.Error("a truncated letter decoded")
	}
	// An invalid value still names what it can, made printable.
	l = letterOf(Position{0, 2}, time.Now(), nil, []byte(`{"requestId":"r\u0007x","orderNo":"o","activityId":1,"itemId":2,"quantity":0}`), nil)
	if l.RequestID != "r?x" || l.OrderNo != "o" || l.Invalid == "" {
		t.Errorf("invalid letter: %+v", l)
	}
	if _, err := letterOf(Position{}, time.Now(), nil, []byte("garbage"), nil).Event(); err == nil {
		t.Error("garbage decoded")
	}
}

// mustReplayEnv is a migrated database and a broker with an order topic.
func mustReplayEnv(t *testing.T) (testenv.Database, testenv.Kafka, string) {
	t.Helper()
	db := testenv.MustDatabase(t)
	k := testenv.MustKafka(t)
	topic := testenv.UniqueName("orders.requested.")
	if err := event.EnsureTopics(context.Background(), k.Brokers, 2, 0, topic, topic+".dlq"); err != nil {
		t.Fatal(err)
	}
	return db, k, topic
}

// published counts the messages on topic that replay the letter at pos.
func published(t *testing.T, k testenv.Kafka, topic string, pos Position) int {
	t.Helper()
	ctx := context.Background()
	r := Reader{Client: &kafka.Client{Addr: kafka.TCP(k.Brokers...), Timeout: 10 * time.Second}, Topic: topic}
	parts, err := r.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	want := topic + ".dlq/" + strings.Replace(pos.String(), ":", "/", 1)
	if err := r.Scan(ctx, parts, func(l Letter) error {
		if v, ok := l.header(HeaderReplayOf); ok && v == want {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReplayPublishesOnce: a publish that fails records nothing (the next
// replay publishes); a replay recorded is never published again, also when
// several run at once.
func TestReplayPublishesOnce(t *testing.T) {
	t.Parallel()
	db, k, topic := mustReplayEnv(t)
	ctx := context.Background()
	_, value := validEvent("r-once")
	l := letterOf(Position{1, 5}, time.Now(), nil, value, []kafka.Header{signedBy(value)})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	dead := event.NewWriter(event.WriterConfig{Brokers: []string{closed}, Topic: topic, WriteTimeout: 200 * time.Millisecond, MaxAttempts: 1})
	defer dead.Close()
	rp := Replayer{Orders: order.NewStore(db.Pool), Producer: dead, DLQTopic: topic + ".dlq", Topic: topic, PublishTimeout: time.Second}
	if res, err := rp.Replay(ctx, l); err == nil {
		t.Fatalf("replay through an unreachable broker: %+v", res)
	}
	if rows, err := order.NewStore(db.Pool).Replays(ctx, topic+".dlq"); err != nil || len(rows) != 0 {
		t.Fatalf("a failed publish left %d rows (%v)", len(rows), err)
	}

	w := event.NewWriter(event.WriterConfig{Brokers: k.Brokers, Topic: topic})
	defer w.Close()
	rp.Producer = w
	res, err := rp.Replay(ctx, l)
	if err != nil || res.Outcome != Replayed || res.RequestID != "r-once" || res.ReplayedAt.IsZero() {
		t.Fatalf("replay: %+v %v", res, err)
	}
	again, err := rp.Replay(ctx, l)
	if err != nil || again.Outcome != AlreadyReplayed || !again.ReplayedAt.Equal(res.ReplayedAt) {
		t.Fatalf("second replay: %+v %v", again, err)
	}
	if n := published(t, k, topic, l.Position); n != 1 {
		t.Errorf("published %d times, want once", n)
	}
	got, err := Replays(ctx, order.NewStore(db.Pool), topic+".dlq")
	if err != nil || got[l.Position].RequestID != "r-once" || got[l.Position].Topic != topic || len(got) != 1 {
		t.Errorf("recorded replays: %+v %v", got, err)
	}

	// Eight at once: one publishes.
	l2 := letterOf(Position{0, 9}, time.Now(), nil, value, []kafka.Header{signedBy(value)})
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[Outcome]int{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := rp.Replay(ctx, l2)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			outcomes[res.Outcome]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if outcomes[Replayed] != 1 || outcomes[AlreadyReplayed] != 7 {
		t.Errorf("concurrent replays: %v", outcomes)
	}
	if n := published(t, k, topic, l2.Position); n != 1 {
		t.Errorf("published %d times by concurrent replays, want once", n)
	}

	// Invalid, or valid but not signed by the gateway: refused, nothing recorded.
	bad := letterOf(Position{0, 10}, time.Now(), nil, []byte(`{"requestId":"x"}`), nil)
	if res, err := rp.Replay(ctx, bad); err != nil || res.Outcome != StillInvalid || res.Reason == "" {
		t.Errorf("invalid letter: %+v %v", res, err)
	}
	_, foreign := validEvent("r-foreign")
	if res, err := rp.Replay(ctx, letterOf(Position{0, 11}, time.Now(), nil, foreign, nil)); err != nil || res.Outcome != StillInvalid ||
		!strings.Contains(res.Reason, "EVENT_SIGNING_KEY") {
		t.Errorf("unsigned letter: %+v %v", res, err)
	}
	if got, _ := Replays(ctx, order.NewStore(db.Pool), topic+".dlq"); len(got) != 2 {
		t.Errorf("%d replays recorded, want 2", len(got))
	}
}
