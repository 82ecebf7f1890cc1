package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// mustKeyedTopic creates a topic of parts partitions and writes msgs to it,
// keyed as the gateway keys them (by hash), and fails unless they landed on
// at least minParts partitions: the lag must be a sum, not one partition's.
// It returns the topic and how many records it holds: at least len(msgs),
// more where the writer sent a batch again whose first answer a fresh,
// busy cluster did not give in time (the writer is not idempotent).
func mustKeyedTopic(t *testing.T, k testenv.Kafka, parts, minParts int, msgs []kafka.Message) (string, int64) {
	t.Helper()
	topic := testenv.UniqueName("orders.")
	ctx := context.Background()
	if err := event.EnsureTopics(ctx, k.Brokers, parts, 0, topic); err != nil {
		t.Fatal(err)
	}
	w := event.NewWriter(event.WriterConfig{Brokers: k.Brokers, Topic: topic})
	defer w.Close()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	// A fresh transport for each poll (not kafka-go's shared one, nor one
	// kept across polls: either caches metadata that may date from before
	// the partitions had leaders), polled until every message is counted:
	// on a real cluster a partition whose leader the cached metadata lacks
	// is left out of the answer. A busy machine's three brokers may take a
	// while to settle the new topic's leaders.
	var reqs []kafka.OffsetRequest
	for p := range parts {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	used, total := 0, int64(0)
	var last string // the last answer, said if the wait fails
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last offsets answer of %s: %s", topic, last)
		}
	})
	testenv.WaitFor(t, 45*time.Second, "the messages' offsets", func() bool {
		tr := &kafka.Transport{}
		defer tr.CloseIdleConnections()
		c := &kafka.Client{Addr: kafka.TCP(k.Brokers...), Timeout: 5 * time.Second, Transport: tr}
		lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%+v", lo.Topics[topic])
		total, used = 0, 0
		for _, p := range lo.Topics[topic] {
			if p.Error == nil && p.LastOffset > 0 {
				used++
				total += p.LastOffset
			}
		}
		return total >= int64(len(msgs))
	})
	if used < minParts {
		t.Fatalf("%d messages landed on %d partitions, want at least %d: pick other keys", len(msgs), used, minParts)
	}
	return topic, total
}

// consume reads n messages of topic as a member of group and commits them.
func consume(t *testing.T, brokers []string, topic, group string, n int) {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: group, Topic: topic, StartOffset: kafka.FirstOffset,
		MaxWait: 50 * time.Millisecond, CommitInterval: 0, JoinGroupBackoff: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("committing: %v", err)
		}
	}
}

// TestGroupLag asks a real broker: the lag is the sum over every partition,
// counted from the log start where the group has committed nothing (or does
// not exist yet), and shrinks by exactly what the group commits.
func TestGroupLag(t *testing.T) {
	t.Parallel()
	k := testenv.MustKafka(t)
	const n = 24
	var msgs []kafka.Message
	for i := range n {
		msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "1:%d", i%8+1), Value: fmt.Appendf(nil, "m%d", i)})
	}
	topic, held := mustKeyedTopic(t, k, 4, 3, msgs)
	c := &kafka.Client{Addr: kafka.TCP(k.Brokers...)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	group := testenv.UniqueName("g")
	lag := func() int64 {
		t.Helper()
		got, err := GroupLag(ctx, c, topic, group)
		// A real cluster's metadata may not know the fresh topic yet, and
		// a fresh cluster's group coordinator may not be settled yet.
		for err != nil && (errors.Is(err, kafka.UnknownTopicOrPartition) || errors.Is(err, kafka.NotCoordinatorForGroup) ||
			errors.Is(err, kafka.GroupCoordinatorNotAvailable) || errors.Is(err, kafka.GroupLoadInProgress)) && ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			got, err = GroupLag(ctx, c, topic, group)
		}
		if err != nil {
			t.Fatalf("GroupLag: %v", err)
		}
		return got
	}

	t.Run("NoGroupYet", func(t *testing.T) {
		if got := lag(); got != held {
			t.Errorf("lag %d of a group that never joined, want all %d records", got, held)
		}
	})
	t.Run("PartlyCommitted", func(t *testing.T) {
		consume(t, k.Brokers, topic, group, 10)
		if got := lag(); got != held-10 {
			t.Errorf("lag %d after 10 of %d committed, want %d", got, held, held-10)
		}
	})
	t.Run("AllCommitted", func(t *testing.T) {
		consume(t, k.Brokers, topic, group, int(held)-10)
		if got := lag(); got != 0 {
			t.Errorf("lag %d after every message was committed, want 0", got)
		}
	})
	t.Run("UnknownTopic", func(t *testing.T) {
		if got, err := GroupLag(ctx, c, testenv.UniqueName("missing."), group); err == nil {
			t.Errorf("lag of a missing topic: %d, want an error", got)
		}
	})
}

// TestPartitionLag covers what a test broker cannot easily show: a log
// whose start moved (retention) past the group's committed offset.
func TestPartitionLag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                        string
		start, end, committed, want int64
	}{
		{"NothingCommitted", 0, 7, -1, 7},
		{"NothingCommittedLogTrimmed", 5, 7, -1, 2},
		{"Committed", 0, 7, 3, 4},
		{"CommittedBeforeLogStart", 5, 7, 3, 2},
		{"CaughtUp", 5, 7, 7, 0},
		{"EmptyPartition", 0, 0, -1, 0},
		{"CommittedBeyondEnd", 0, 7, 9, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := partitionLag(tc.start, tc.end, tc.committed); got != tc.want {
				t.Errorf("partitionLag(start %d, end %d, committed %d) = %d, want %d", tc.start, tc.end, tc.committed, got, tc.want)
			}
		})
	}
}

// TestLagGaugeMovesWhilePostgresIsDown: with Postgres cut, the worker's
// batches fail and it commits nothing, yet the lag gauge reports every
// message waiting on every partition; when Postgres returns, the worker
// catches up and the gauge falls to 0.
func TestLagGaugeMovesWhilePostgresIsDown(t *testing.T) {
	t.Parallel()
	db, rdb, k := testenv.MustDatabase(t), testenv.MustRedis(t), testenv.MustKafka(t)
	dbURL, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.MustProxy(t, dbURL.Host)
	dbURL.Host = proxy.Addr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := database.Open(ctx, dbURL.String(), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	orders, st := order.NewStore(pool), stock.New(rdb.Client, rdb.Prefix)

	// One reservation on each of 8 items: 8 keys, spread over the partitions.
	const items = 8
	now := time.Now()
	act := order.Activity{ID: 1, Name: "t", StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), PerUserLimit: 1}
	for i := int64(1); i <= items; i++ {
		act.Items = append(act.Items, order.ItemStock{ItemID: i, InitialStock: 10})
	}
	if err := orders.UpsertActivity(ctx, act); err != nil {
		t.Fatal(err)
	}
	var msgs []kafka.Message
	for i := int64(1); i <= items; i++ {
		it := stock.Item{ActivityID: 1, ItemID: i}
		if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: 10, StartsAt: act.StartsAt, EndsAt: act.EndsAt, Cap: 1}); err != nil {
			t.Fatal(err)
		}
		ev := event.OrderRequested{RequestID: fmt.Sprintf("r%d", i), OrderNo: fmt.Sprintf("1-%d-r%d", i, i), UserID: i, ActivityID: 1,
			ItemID: i, Quantity: 1, ReservedAt: now.UTC()}
		msg := event.Message(ctx, ev)
		if res, err := st.Reserve(ctx, stock.Reservation{Item: it, RequestID: ev.RequestID, OrderNo: ev.OrderNo, UserID: i, Quantity: 1,
			Fingerprint: "fp", Event: msg.Value}); err != nil || res.Outcome != stock.Reserved {
			t.Fatalf("reserving %s: %+v %v", ev.RequestID, res, err)
		}
		msgs = append(msgs, msg)
	}

	proxy.Down()
	topic, held := mustKeyedTopic(t, k, 4, 3, msgs)
	if err := event.EnsureTopics(ctx, k.Brokers, 1, 0, topic+".dlq"); err != nil {
		t.Fatal(err)
	}
	dlq := event.NewWriter(event.WriterConfig{Brokers: k.Brokers, Topic: topic + ".dlq"})
	defer dlq.Close()
	metrics := telemetry.NewMetrics()
	w := New(Config{Brokers: k.Brokers, Topic: topic, DLQTopic: topic + ".dlq", GroupID: testenv.UniqueName("g"),
		LagInterval: 50 * time.Millisecond, BreakerOpenFor: 100 * time.Millisecond},
		Deps{Orders: orders, Stock: st, DLQ: dlq, Metrics: metrics, Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()

	gauge := func() float64 { return testutil.ToFloat64(metrics.ConsumerLag) }
	testenv.WaitFor(t, 20*time.Second, "the lag gauge to count every waiting message", func() bool { return gauge() == float64(held) })
	// The batch is being retried, not committed: the gauge must not be a
	// reading taken before the worker got the messages.
	testenv.WaitFor(t, 20*time.Second, "a failed batch (the worker's Postgres breaker open)", func() bool {
		return testutil.ToFloat64(metrics.BreakerState.WithLabelValues("worker-postgres")) == 2
	})
	if got := gauge(); got != float64(held) {
		t.Fatalf("lag gauge %v while no batch could commit, want %d", got, held)
	}

	proxy.Up(t)
	testenv.WaitFor(t, 30*time.Second, "the lag gauge to fall to 0", func() bool { return gauge() == 0 })
	if n := ordertest.CountOrders(t, db.Pool); n != items {
		t.Errorf("%d orders once the lag read 0, want %d", n, items)
	}
}
