package relay_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/invariant"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
	"orderpipe/pkg/topic"
	"orderpipe/worker/relay"
)

// env is a store with a sale (activity 1, item 10) and a topic on a broker.
type env struct {
	url    string
	orders *order.Store
	kafka  testenv.Kafka
	topic  string
	client *kafka.Client
	sale   *ordertest.StatusSale
}

func mustEnv(tb testing.TB) *env {
	tb.Helper()
	db := testenv.MustDatabase(tb)
	e := &env{url: db.URL, orders: order.NewStore(db.Pool), kafka: testenv.MustKafka(tb), topic: testenv.UniqueName("orders.status.")}
	e.sale = ordertest.MustStatusSale(tb, e.orders, 1000)
	if err := event.EnsureTopics(context.Background(), e.kafka.Brokers, 4, 1, e.topic); err != nil {
		tb.Fatal(err)
	}
	e.client = &kafka.Client{Addr: kafka.TCP(e.kafka.Brokers...), Timeout: 10 * time.Second}
	return e
}

// relay builds a relay replica on the env's topic; its writer is closed at cleanup.
func (e *env) relay(tb testing.TB, m *telemetry.Metrics, beforeMark func(context.Context, []order.StatusEvent) error) *relay.Relay {
	tb.Helper()
	w := event.NewWriter(event.WriterConfig{Brokers: e.kafka.Brokers, Topic: e.topic, WriteTimeout: time.Second, MaxAttempts: 2})
	tb.Cleanup(func() { w.Close() })
	return relay.New(relay.Config{Topic: e.topic, Interval: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		relay.Deps{Orders: e.orders, Writer: w, Metrics: m, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), BeforeMarkFunc: beforeMark})
}

// changes makes and changes n orders of the sale (StatusSale.Change).
func (e *env) changes(tb testing.TB, n int) {
	tb.Helper()
	if err := e.sale.Change(context.Background(), n); err != nil {
		tb.Fatal(err)
	}
}

// mustAudit fails tb with every I7 violation on the topic.
func (e *env) mustAudit(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	if err := invariant.WaitPublished(ctx, e.orders, 30*time.Second); err != nil {
		tb.Fatal(err)
	}
	problems, err := invariant.AuditStatus(ctx, e.orders, e.client, e.topic, 1)
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range problems {
		tb.Error(p)
	}
}

// messages counts the messages on the topic.
func (e *env) messages(tb testing.TB) int {
	tb.Helper()
	r := topic.Reader{Client: e.client, Topic: e.topic}
	bounds, err := r.Partitions(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, b := range bounds {
		n += int(b.Next - b.First)
	}
	return n
}

func run(tb testing.TB, r *relay.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }() //nolint:errcheck
	stop = func() { cancel(); <-done }
	tb.Cleanup(stop)
	return stop
}

// TestRelayPublishesEveryChangeInOrder: three replicas publish while
// changes commit; every change is on the topic, in version order per
// order, and nothing else.
func TestRelayPublishesEveryChangeInOrder(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	m := telemetry.NewMetrics()
	for range 3 {
		run(t, e.relay(t, m, nil))
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { e.changes(t, 30) })
	}
	wg.Wait()
	e.mustAudit(t)
	// Orders 1..90: 45 paid, 15 cancelled, each with 2 events; 30 with one.
	if got := testutil.ToFloat64(m.StatusPublished.WithLabelValues("UNPAID")); got < 90 {
		t.Errorf("%v UNPAID events published, want at least 90", got)
	}
}

// TestRelayRidesOutABrokerOutage: while the broker refuses every produce,
// the relay marks nothing published and changes keep committing; once the
// broker is back, every event is published, in order.
func TestRelayRidesOutABrokerOutage(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	if e.kafka.Cluster == nil {
		t.Skip("needs the in-process broker to refuse produces")
	}
	e.changes(t, 10)
	var down atomic.Bool
	down.Store(true)
	c := e.kafka.Cluster
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !down.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		return nil, errors.New("broker down"), true
	})
	m := telemetry.NewMetrics()
	run(t, e.relay(t, m, nil))
	testenv.WaitFor(t, 30*time.Second, "two failed relay passes", func() bool {
		return testutil.ToFloat64(m.RelayPasses.WithLabelValues("error")) >= 2
	})
	e.changes(t, 10)
	hist, err := e.orders.StatusHistories(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for no, h := range hist {
		for _, r := range h.Rows {
			if r.PublishedAt != nil {
				t.Fatalf("%s v%d was marked published while the broker refused every produce", no, r.Version)
			}
		}
	}
	if n := e.messages(t); n != 0 {
		t.Fatalf("%d messages on the topic while the broker refused every produce", n)
	}
	down.Store(false)
	e.mustAudit(t)
}

// TestRelayRestartRepublishesWhatItDidNotMark: a relay that dies between
// the broker's acknowledgement and its mark leaves the rows unpublished; the
// next replica publishes them again (at least once), still in order.
func TestRelayRestartRepublishesWhatItDidNotMark(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.changes(t, 12)
	crashed := e.relay(t, nil, func(context.Context, []order.StatusEvent) error { return errors.New("killed before marking") })
	if _, err := crashed.RunOnce(context.Background()); err == nil {
		t.Fatal("the crashing relay reported no error")
	}
	sent := e.messages(t)
	if sent == 0 {
		t.Fatal("the crashing relay published nothing")
	}
	if n, _, _ := e.orders.EventBacklog(context.Background()); n == 0 {
		t.Fatal("a relay that died before marking marked its events")
	}
	run(t, e.relay(t, nil, nil))
	e.mustAudit(t)
	if got := e.messages(t); got <= sent {
		t.Errorf("%d messages after the restart, %d before: nothing was republished", got, sent)
	}
}

// TestRelayRidesOutAPostgresOutage: Postgres goes away just after a batch
// was acknowledged by the broker and before its mark commits, and stays away
// while the relay retries; once it is back, every event is on the topic, in
// order — the unmarked batch again, nothing lost.
func TestRelayRidesOutAPostgresOutage(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.changes(t, 10)
	dbURL, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.MustProxy(t, dbURL.Host)
	dbURL.Host = proxy.Addr
	pool, err := database.OpenLazy(context.Background(), dbURL.String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var cut sync.Once
	m := telemetry.NewMetrics()
	w := event.NewWriter(event.WriterConfig{Brokers: e.kafka.Brokers, Topic: e.topic})
	t.Cleanup(func() { w.Close() })
	r := relay.New(relay.Config{Topic: e.topic, Interval: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		relay.Deps{Orders: order.NewStore(pool), Writer: w, Metrics: m, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)),
			BeforeMarkFunc: func(context.Context, []order.StatusEvent) error {
				cut.Do(proxy.Down)
				return nil
			}})
	run(t, r)
	testenv.WaitFor(t, 30*time.Second, "two failed relay passes", func() bool {
		return testutil.ToFloat64(m.RelayPasses.WithLabelValues("error")) >= 2
	})
	sent := e.messages(t)
	if sent == 0 {
		t.Fatal("nothing was published before Postgres went away")
	}
	if n, _, _ := e.orders.EventBacklog(context.Background()); n == 0 {
		t.Fatal("the batch was marked although Postgres went away before its commit")
	}
	e.changes(t, 5)
	proxy.Up(t)
	e.mustAudit(t)
	if got := e.messages(t); got <= sent {
		t.Errorf("%d messages after Postgres returned, %d before: the unmarked batch was not published again", got, sent)
	}
}
