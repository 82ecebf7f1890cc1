package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

type fixture struct {
	db     testenv.Database
	rdb    testenv.Redis
	orders *order.Store
	stock  *stock.Store
	sr     stocktest.Redis // stock's client and prefix
	item   stock.Item
	dlq    *recordingProducer
	w      *Worker
}

// recordingProducer keeps dead letters in memory for tests that call
// ProcessBatch directly; Run tests use a real topic.
type recordingProducer struct{ msgs []kafka.Message }

func (r *recordingProducer) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	r.msgs = append(r.msgs, msgs...)
	return nil
}

func mustFixture(t *testing.T, initial int64) *fixture {
	t.Helper()
	f := &fixture{db: testenv.MustDatabase(t), rdb: testenv.MustRedis(t), item: stock.Item{ActivityID: 1, ItemID: 2}, dlq: &recordingProducer{}}
	f.orders = order.NewStore(f.db.Pool)
	f.stock = stock.New(f.rdb.Client, f.rdb.Prefix)
	f.sr = stocktest.On(f.rdb.Client, f.rdb.Prefix)
	ctx := context.Background()
	now := time.Now()
	if err := f.orders.UpsertActivity(ctx, order.Activity{ID: 1, Name: "t", StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour),
		PerUserLimit: 1, Items: []order.ItemStock{{ItemID: 2, InitialStock: initial}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.stock.Preheat(ctx, stock.Sale{Item: f.item, Stock: initial, StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Cap: 1}); err != nil {
		t.Fatal(err)
	}
	f.w = f.newWorker(Config{}, f.dlq)
	return f
}

// newWorker is a worker on the fixture's stores that dead-letters to dlq.
func (f *fixture) newWorker(cfg Config, dlq Producer) *Worker {
	return New(cfg, Deps{Orders: f.orders, Stock: f.stock, DLQ: dlq, Metrics: telemetry.NewMetrics(),
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
}

// kafkaWorker is a worker, in a group of its own, on a real order topic
// and a real DLQ topic.
type kafkaWorker struct {
	*Worker
	brokers         []string
	topic, dlqTopic string
}

// mustKafkaWorker names the topics and builds the worker; the caller
// creates the topics, whose limits differ between tests. The DLQ writer is
// closed at cleanup.
func (f *fixture) mustKafkaWorker(t *testing.T) kafkaWorker {
	t.Helper()
	k := testenv.MustKafka(t)
	topic := testenv.UniqueName("orders.")
	dlqTopic := topic + ".dlq"
	dlq := event.NewWriter(event.WriterConfig{Brokers: k.Brokers, Topic: dlqTopic})
	t.Cleanup(func() { dlq.Close() })
	w := f.newWorker(Config{Brokers: k.Brokers, Topic: topic, DLQTopic: dlqTopic, GroupID: testenv.UniqueName("g")}, dlq)
	return kafkaWorker{Worker: w, brokers: k.Brokers, topic: topic, dlqTopic: dlqTopic}
}

// start runs the worker until stop, which fails t if Run returned an
// error; a test that ends before stop still ends the run at cleanup.
func (kw kafkaWorker) start(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- kw.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// mustDeadLetters reads the first n messages of the DLQ topic, waiting 10 s
// at most.
func (kw kafkaWorker) mustDeadLetters(t *testing.T, n int) []kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: kw.brokers, Topic: kw.dlqTopic, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]kafka.Message, n)
	for i := range out {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("reading dlq: %v", err)
		}
		out[i] = m
	}
	return out
}

// reserve runs the reserve script for a user and returns the event message.
func (f *fixture) reserve(t *testing.T, rid string, user int64) kafka.Message {
	t.Helper()
	ev := event.OrderRequested{RequestID: rid, OrderNo: fmt.Sprintf("1-2-%s", rid), UserID: user, ActivityID: 1, ItemID: 2,
		Quantity: 1, ReservedAt: time.Now().UTC()}
	msg := event.Message(context.Background(), ev)
	res, err := f.stock.Reserve(context.Background(), stock.Reservation{Item: f.item, RequestID: rid, OrderNo: ev.OrderNo, UserID: user,
		Quantity: 1, Fingerprint: "fp", Event: msg.Value})
	if err != nil || res.Outcome != stock.Reserved {
		t.Fatalf("reserve %s: %v %v", rid, res, err)
	}
	return msg
}

// mustProcess has the fixture's worker process one batch.
func (f *fixture) mustProcess(t *testing.T, batch ...kafka.Message) {
	t.Helper()
	if err := f.w.ProcessBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

// snapshot is the sale's rows in Postgres.
func (f *fixture) snapshot(t *testing.T) order.ActivitySnapshot {
	t.Helper()
	snap, err := f.orders.Snapshot(context.Background(), f.item.ActivityID)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// countOrders counts the sale's orders that match.
func (f *fixture) countOrders(t *testing.T, match func(order.SnapshotOrder) bool) int64 {
	t.Helper()
	return count(f.snapshot(t).Orders, match)
}

// decision is the request's processed_requests row (zero when none).
func (f *fixture) decision(t *testing.T, requestID string) order.Decided {
	t.Helper()
	for _, d := range f.snapshot(t).Decisions {
		if d.RequestID == requestID {
			return d
		}
	}
	return order.Decided{}
}

// countDecisions counts the sale's processed_requests rows that match.
func (f *fixture) countDecisions(t *testing.T, match func(order.Decided) bool) int64 {
	t.Helper()
	return count(f.snapshot(t).Decisions, match)
}

// countCompensations counts the compensation outbox's rows that match.
func (f *fixture) countCompensations(t *testing.T, match func(ordertest.CompensationRow) bool) int64 {
	t.Helper()
	return count(ordertest.Compensations(t, f.db.Pool), match)
}

// count counts the rows that match.
func count[T any](rows []T, match func(T) bool) int64 {
	var n int64
	for _, r := range rows {
		if match(r) {
			n++
		}
	}
	return n
}

// dbStock is the item's stock in Postgres.
func (f *fixture) dbStock(t *testing.T) int64 {
	t.Helper()
	s, err := f.orders.ItemStockOf(context.Background(), f.item.ActivityID, f.item.ItemID)
	if err != nil {
		t.Fatal(err)
	}
	return s.Stock
}

func (f *fixture) redisStock(t *testing.T) int64 {
	t.Helper()
	return stocktest.MustStock(t, f.sr, f.item)
}

// assertStocks checks that Redis and Postgres both hold want units of the
// item, as they must once nothing is in flight (I5).
func (f *fixture) assertStocks(t *testing.T, want int64) {
	t.Helper()
	stocktest.WantStock(t, f.sr, f.item, want, "")
	if got := f.dbStock(t); got != want {
		t.Errorf("db stock %d, want %d", got, want)
	}
}

func TestRedeliveryMakesOneOrder(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	a, b := f.reserve(t, "a", 1), f.reserve(t, "b", 2)
	// The same message twice in one batch, then the whole batch again.
	for _, batch := range [][]kafka.Message{{a, a, b}, {a, a, b}} {
		f.mustProcess(t, batch...)
	}
	if n := int64(ordertest.CountOrders(t, f.db.Pool)); n != 2 {
		t.Errorf("%d orders, want 2", n)
	}
	f.assertStocks(t, 8)
	if n := int64(len(stocktest.Journal(t, f.sr, f.item))); n != 0 {
		t.Errorf("%d journal entries left after commit", n)
	}
}

func TestDBStockMismatchIsRejectedAndCompensatedOnce(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	ctx := context.Background()
	// Postgres has fewer units than Redis believes (someone sold 9 elsewhere).
	ordertest.ResizeStock(t, f.db.Pool, f.item.ActivityID, f.item.ItemID, 1)
	a, b := f.reserve(t, "a", 1), f.reserve(t, "b", 2)
	if got := f.redisStock(t); got != 8 {
		t.Fatalf("redis stock after two reserves %d", got)
	}
	for range 3 { // redelivered: still one compensation
		f.mustProcess(t, a, b)
	}
	d := f.decision(t, "b")
	if d.RequestID == "" {
		t.Fatal("b has no decision")
	}
	if d.Outcome != order.Rejected || d.Reason != order.ReasonDBStockMismatch {
		t.Errorf("b: %s %s", d.Outcome, d.Reason)
	}
	if n := f.countCompensations(t, func(c ordertest.CompensationRow) bool { return c.Applied && c.RequestID == "b" }); n != 1 {
		t.Errorf("%d applied compensations for b, want 1", n)
	}
	// Redis got exactly b's unit back: 10 - 2 reserved + 1 released.
	stocktest.WantStock(t, f.sr, f.item, 9, "")
	if stocktest.MarkerOwner(t, f.sr, f.item, 2) != "" {
		t.Error("rejected user's limit marker was not freed")
	}
	// Applying the same compensation again (a sweeper racing) changes nothing.
	comps := []order.Compensation{{RequestID: "b", OrderNo: "1-2-b", ActivityID: 1, ItemID: 2, UserID: 2, Quantity: 1, Reason: "again"}}
	if _, err := f.w.applier.Apply(ctx, comps); err != nil {
		t.Fatal(err)
	}
	stocktest.WantStock(t, f.sr, f.item, 9, "after a repeated compensation")
	if n := int64(ordertest.CountOrders(t, f.db.Pool)); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

func TestDuplicateLiveOrderKeepsMarkerWithHolder(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	first := f.reserve(t, "first", 1)
	f.mustProcess(t, first)
	// Redis lost the user's marker (a failover); the same user reserves again.
	stocktest.DropMarker(t, f.sr, f.item, 1)
	second := f.reserve(t, "second", 1)
	f.mustProcess(t, second)
	if reason := f.decision(t, "second").Reason; reason != order.ReasonDuplicateLiveOrder {
		t.Errorf("second: reason %q", reason)
	}
	f.assertStocks(t, 9)
	if owner := stocktest.MarkerOwner(t, f.sr, f.item, 1); owner != "first" {
		t.Errorf("marker owner %q, want the live order's request", owner)
	}
}

func TestGarbageGoesToDLQAndDoesNotBlock(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	w := f.mustKafkaWorker(t)
	ctx := context.Background()
	if err := event.EnsureTopics(ctx, w.brokers, 1, 0, w.topic, w.dlqTopic); err != nil {
		t.Fatal(err)
	}

	// A schema-invalid message that still names a held reservation: it is
	// dead-lettered, and the reservation is decided from its journal entry.
	bad := f.reserve(t, "bad", 3)
	bad.Value = []byte(`{"requestId":"bad","orderNo":"1-2-bad","userId":3,"activityId":1,"itemId":2,"quantity":"1","reservedAt":"2026-01-01T00:00:00Z"}`)
	good := f.reserve(t, "good", 4)
	prod := event.NewWriter(event.WriterConfig{Brokers: w.brokers, Topic: w.topic})
	defer prod.Close()
	garbage := kafka.Message{Key: []byte("1:2"), Value: []byte("\x00not json")}
	if err := prod.WriteMessages(ctx, garbage, bad, good); err != nil {
		t.Fatal(err)
	}
	stop := w.start(t)

	testenv.WaitFor(t, 20*time.Second, "the message after the garbage", func() bool {
		return f.countOrders(t, func(o order.SnapshotOrder) bool { return o.RequestID == "good" || o.RequestID == "bad" }) == 2
	})
	var errs []string
	for _, m := range w.mustDeadLetters(t, 2) {
		if e := event.Header(m, event.HeaderError); e == "" {
			t.Errorf("dead letter %q without error header", m.Value)
		} else {
			errs = append(errs, e)
		}
	}
	if len(errs) != 2 {
		t.Errorf("dead letters: %v", errs)
	}
	if n := int64(ordertest.CountOrders(t, f.db.Pool)); n != 2 {
		t.Errorf("%d orders, want the good one and the one the bad message pointed to", n)
	}
	// 10 - 2 reserved, both units now in Postgres.
	f.assertStocks(t, 8)
	stop()
}

// TestGhostEventIsSkipped: the gateway aborted a reservation after a produce
// that looked failed but arrived; the event must not become an order, and the
// client's retry (a new reservation, same requestId) must.
func TestGhostEventIsSkipped(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	ctx := context.Background()
	ghost := f.reserve(t, "r", 1)
	if out, err := f.stock.Release(ctx, stock.Unproduced, stock.Release{Item: f.item, Ref: stock.Ref{RequestID: "r", OrderNo: "1-2-r"}, UserID: 1, Quantity: 1}); err != nil || out != stock.Released {
		t.Fatalf("abort: %s %v", out, err)
	}
	f.mustProcess(t, ghost)
	if n := len(f.snapshot(t).Decisions); n != 0 {
		t.Fatalf("ghost was processed (%d rows)", n)
	}
	ev := event.OrderRequested{RequestID: "r", OrderNo: "1-2-r-retry", UserID: 1, ActivityID: 1, ItemID: 2, Quantity: 1, ReservedAt: time.Now().UTC()}
	retry := event.Message(ctx, ev)
	if res, err := f.stock.Reserve(ctx, stock.Reservation{Item: f.item, RequestID: "r", OrderNo: ev.OrderNo, UserID: 1, Quantity: 1,
		Fingerprint: "fp", Event: retry.Value}); err != nil || res.Outcome != stock.Reserved {
		t.Fatalf("retry: %+v %v", res, err)
	}
	f.mustProcess(t, ghost, retry)
	if n := f.countOrders(t, func(o order.SnapshotOrder) bool { return o.OrderNo == "1-2-r-retry" }); n != 1 {
		t.Errorf("retry made %d orders", n)
	}
	f.assertStocks(t, 9)
}

// TestSweepAppliesCompensationsLeftByACrash: a worker that died between its
// commit and Redis left a rejection's compensation pending; the sweep of a
// running worker applies it (I5), exactly once.
func TestSweepAppliesCompensationsLeftByACrash(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	ctx := context.Background()
	ordertest.ResizeStock(t, f.db.Pool, f.item.ActivityID, f.item.ItemID, 1)
	f.reserve(t, "a", 1)
	f.reserve(t, "b", 2)
	refs := []stock.Ref{{RequestID: "a", OrderNo: "1-2-a"}, {RequestID: "b", OrderNo: "1-2-b"}}
	if _, err := f.stock.Claim(ctx, f.item, refs); err != nil {
		t.Fatal(err)
	}
	// The crashed worker's transaction: b is refused, its compensation written, never applied.
	reqs := make([]order.Request, len(refs))
	for i, r := range refs {
		reqs[i] = order.Request{RequestID: r.RequestID, OrderNo: r.OrderNo, UserID: int64(i + 1), ActivityID: 1, ItemID: 2, Quantity: 1,
			ReservedAt: time.Now(), Held: true}
	}
	if _, err := f.orders.DecideBatch(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	if got := f.redisStock(t); got != 8 {
		t.Fatalf("redis stock %d before the sweep, want 8", got)
	}
	w := f.newWorker(Config{SweepInterval: 20 * time.Millisecond, SweepAfter: time.Millisecond}, f.dlq)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.sweepLoop(sctx) }()
	testenv.WaitFor(t, 10*time.Second, "the pending compensation applied", func() bool {
		return f.countCompensations(t, func(c ordertest.CompensationRow) bool { return !c.Applied }) == 0
	})
	time.Sleep(100 * time.Millisecond) // more sweeps: none may apply it again
	stop()
	<-done
	stocktest.WantStock(t, f.sr, f.item, 9, "after the sweep: b's unit back, once")
	if stocktest.MarkerOwner(t, f.sr, f.item, 2) != "" {
		t.Error("the refused user's limit marker was not freed")
	}
}

// TestCorruptCopyIsDecidedByTheJournal: a corrupt copy of an event names a
// real reservation but claims another user and quantity. The message is only
// a pointer: the order is made from what the journal says was reserved (user
// 3, 1 unit), and nothing is given back; the original, arriving after, is a
// duplicate.
func TestCorruptCopyIsDecidedByTheJournal(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	orig := f.reserve(t, "victim", 3)
	f.reserve(t, "bystander", 4)
	corrupt := kafka.Message{Key: []byte("1:2"), Value: []byte(`{"requestId":"victim","orderNo":"1-2-victim","userId":4,` +
		`"activityId":1,"itemId":2,"quantity":500,"reservedAt":"2026-01-01T00:00:00Z"}`)}
	for _, batch := range [][]kafka.Message{{corrupt}, {orig}, {corrupt, orig}} {
		f.mustProcess(t, batch...)
	}
	if len(f.dlq.msgs) != 2 {
		t.Fatalf("%d dead letters, want 2 (the corrupt copy, twice)", len(f.dlq.msgs))
	}
	var victim []order.SnapshotOrder
	for _, o := range f.snapshot(t).Orders {
		if o.RequestID == "victim" && o.Status == order.StatusUnpaid {
			victim = append(victim, o)
		}
	}
	if len(victim) != 1 {
		t.Fatalf("the victim's order: %d UNPAID orders of victim, want 1", len(victim))
	}
	if user, qty := victim[0].UserID, victim[0].Quantity; user != 3 || qty != 1 {
		t.Errorf("order of user %d, quantity %d; want user 3, quantity 1 (as reserved)", user, qty)
	}
	stocktest.WantStock(t, f.sr, f.item, 8, "nothing given back")
	if got := stocktest.MarkerOwner(t, f.sr, f.item, 3); got != "victim" {
		t.Errorf("user 3's marker is %q, want victim's", got)
	}
	if got := stocktest.MarkerOwner(t, f.sr, f.item, 4); got != "bystander" {
		t.Errorf("user 4's marker is %q, want bystander's", got)
	}
}

// TestCopyAfterCommitBeforeAckChangesNothing: the original was committed by
// a worker that died before acking its journal entry; a corrupt or altered
// copy handled then must not give the live order's unit or marker back.
func TestCopyAfterCommitBeforeAckChangesNothing(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{
		"Corrupt": `{"requestId":"a","orderNo":"1-2-a","userId":1,"activityId":1,"itemId":2,"quantity":-1}`,
		"Altered": `{"requestId":"a","orderNo":"1-2-a","userId":9,"activityId":1,"itemId":2,"quantity":2,"reservedAt":"2026-01-01T00:00:00Z"}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := mustFixture(t, 10)
			ctx := context.Background()
			f.reserve(t, "a", 1)
			ref := stock.Ref{RequestID: "a", OrderNo: "1-2-a"}
			if _, err := f.stock.Claim(ctx, f.item, []stock.Ref{ref}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.orders.DecideBatch(ctx, []order.Request{{RequestID: "a", OrderNo: "1-2-a", UserID: 1, ActivityID: 1,
				ItemID: 2, Quantity: 1, ReservedAt: time.Now(), Held: true}}); err != nil {
				t.Fatal(err)
			}
			cp := kafka.Message{Key: []byte("1:2"), Value: []byte(value)}
			f.mustProcess(t, cp)
			stocktest.WantStock(t, f.sr, f.item, 9, "the live order keeps its unit")
			if got := stocktest.MarkerOwner(t, f.sr, f.item, 1); got != "a" {
				t.Errorf("user 1's marker is %q, want a's", got)
			}
			if n := f.countOrders(t, func(o order.SnapshotOrder) bool {
				return o.RequestID == "a" && o.Status == order.StatusUnpaid && o.UserID == 1 && o.Quantity == 1
			}); n != 1 {
				t.Errorf("%d live orders of a as reserved, want 1", n)
			}
			if n := len(ordertest.Compensations(t, f.db.Pool)); n != 0 {
				t.Errorf("%d compensations, want none", n)
			}
		})
	}
}

// TestInvalidJournalEntryIsReleased: only a reservation whose own journal
// entry is invalid (it can never become an order) is given back, by what
// that entry says.
func TestInvalidJournalEntryIsReleased(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	msg := f.reserve(t, "broken", 5)
	stocktest.SetJournalEntry(t, f.sr, f.item, "broken",
		`{"requestId":"broken","orderNo":"1-2-broken","userId":5,"activityId":1,"itemId":2,"quantity":1}`)
	f.mustProcess(t, msg)
	stocktest.WantStock(t, f.sr, f.item, 10, "the unit back")
	if stocktest.MarkerOwner(t, f.sr, f.item, 5) != "" {
		t.Error("the released reservation's user keeps the marker")
	}
	if n := int64(ordertest.CountOrders(t, f.db.Pool)); n != 0 {
		t.Errorf("%d orders from an invalid journal entry", n)
	}
}

// TestOversizedPoisonDoesNotBlock: a poison message far over what the DLQ
// topic takes (a broker's default is 1 MiB) is dead-lettered truncated, with
// its size and source offset in headers, and the partition goes on.
func TestOversizedPoisonDoesNotBlock(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	w := f.mustKafkaWorker(t)
	ctx := context.Background()
	// The order topic takes large messages (a misconfigured producer
	// elsewhere); the DLQ topic keeps the broker's default limit.
	res, err := (&kafka.Client{Addr: kafka.TCP(w.brokers...), Timeout: 10 * time.Second}).CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: w.topic, NumPartitions: 1, ReplicationFactor: -1,
			ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: fmt.Sprint(8 << 20)}}}}})
	if err != nil || res.Errors[w.topic] != nil {
		t.Fatalf("creating %s: %v %v", w.topic, err, res)
	}
	if err := event.EnsureTopics(ctx, w.brokers, 1, 0, w.dlqTopic); err != nil {
		t.Fatal(err)
	}

	const poisonSize = 3 << 20
	poison := kafka.Message{Key: []byte("1:2"), Value: bytes.Repeat([]byte("x"), poisonSize),
		Headers: []kafka.Header{{Key: "junk", Value: bytes.Repeat([]byte("h"), 64<<10)}}}
	good := f.reserve(t, "after-poison", 4)
	prod := &kafka.Writer{Addr: kafka.TCP(w.brokers...), Topic: w.topic, BatchBytes: 8 << 20, BatchTimeout: time.Millisecond,
		RequiredAcks: kafka.RequireAll}
	defer prod.Close()
	if err := prod.WriteMessages(ctx, poison, good); err != nil {
		t.Fatal(err)
	}
	stop := w.start(t)
	testenv.WaitFor(t, 30*time.Second, "the order behind the poison message", func() bool {
		return f.countOrders(t, func(o order.SnapshotOrder) bool { return o.RequestID == "after-poison" }) == 1
	})
	m := w.mustDeadLetters(t, 1)[0]
	if len(m.Value) != MaxDeadLetterValue || event.Header(m, event.HeaderTruncated) != "true" ||
		event.Header(m, event.HeaderOriginalSize) != fmt.Sprint(poisonSize) || event.Header(m, event.HeaderSourceOffset) != "0" ||
		event.Header(m, event.HeaderSourcePartition) != "0" || event.Header(m, event.HeaderError) == "" ||
		event.Header(m, event.HeaderHeadersDropped) != "1" || event.Header(m, "junk") != "" {
		t.Errorf("dead letter: %d bytes, headers %v", len(m.Value), headerNames(m))
	}
	stop()
}

func headerNames(m kafka.Message) map[string]int {
	out := map[string]int{}
	for _, h := range m.Headers {
		out[h.Key] = len(h.Value)
	}
	return out
}

// TestCopyMovedToAnotherItemChangesNothing: a schema-valid copy of a real
// event that names another item (with the original's requestId and orderNo)
// finds no journal entry there; its orderNo names the original's item, so it
// is not the gateway's and creates no order. The original, after it, makes
// the order as reserved.
func TestCopyMovedToAnotherItemChangesNothing(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10)
	orig := f.reserve(t, "moved", 6)
	moved := kafka.Message{Key: []byte("1:3"), Value: []byte(`{"requestId":"moved","orderNo":"1-2-moved","userId":7,` +
		`"activityId":1,"itemId":3,"quantity":1,"reservedAt":"2026-01-01T00:00:00Z"}`)}
	for _, batch := range [][]kafka.Message{{moved}, {orig}} {
		f.mustProcess(t, batch...)
	}
	if n := f.countOrders(t, func(o order.SnapshotOrder) bool {
		return o.RequestID == "moved" && o.ItemID == 2 && o.UserID == 6 && o.Status == order.StatusUnpaid
	}); n != 1 {
		t.Errorf("%d orders as reserved, want 1", n)
	}
	if n := f.countDecisions(t, func(d order.Decided) bool { return d.RequestID == "moved" && d.Outcome == order.Created }); n != 1 {
		t.Errorf("%d CREATED records of moved, want 1", n)
	}
	if n := f.countOrders(t, func(o order.SnapshotOrder) bool { return o.ItemID == 3 }); n != 0 {
		t.Errorf("%d orders for the item the copy named", n)
	}
}
