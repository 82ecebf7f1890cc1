package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// TestRedrivePass: one pass re-publishes the old undecided entry (as the
// gateway would have, marked redriven), acks the old created one, leaves the
// rejected one to its compensation and the young one to the gateway, and
// backs off before re-publishing the same entry again.
func TestRedrivePass(t *testing.T) {
	t.Parallel()
	f := newRedriveSale(t, 5, 6)
	ctx, r, k, orders, st, it, now, reserve := f.ctx, f.r, f.k, f.orders, f.st, f.it, f.now, f.reserve
	topic := f.topic
	decide := func(ev event.OrderRequested) order.Decision {
		t.Helper()
		if _, err := st.Claim(ctx, it, []stock.Ref{{RequestID: ev.RequestID, OrderNo: ev.OrderNo}}); err != nil {
			t.Fatal(err)
		}
		ds, err := orders.DecideBatch(ctx, []order.Request{{RequestID: ev.RequestID, OrderNo: ev.OrderNo, UserID: ev.UserID,
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
	ordertest.SetStock(t, f.db.Pool, it.ActivityID, it.ItemID, 0)
	if d := decide(rejected); d.Outcome != order.Rejected {
		t.Fatalf("rejected decided %s", d.Outcome)
	}
	reserve("young", 4, now)

	writer := event.NewWriter(event.WriterConfig{Brokers: k.Brokers, Topic: topic})
	defer writer.Close()
	clock := now
	rd := NewRedriver(RedriveConfig{After: 30 * time.Second}, RedriveDeps{Orders: orders, Stock: st, Events: writer,
		Locker: lock.New(r.Client, r.Prefix), Metrics: telemetry.NewMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NowFunc: func() time.Time { return clock }, TickFunc: func() time.Time { return clock }})

	res, err := rd.runOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Republished != 1 || res.Acked != 1 || res.Rejected != 1 || res.Entries != 4 {
		t.Errorf("pass %+v; want 1 republished, 1 acked, 1 rejected of 4 entries", res)
	}
	journal := r.Client.HKeys(ctx, stocktest.KeysOf(stocktest.On(r.Client, r.Prefix), it).Journal).Val()
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

// TestRedriveLongJournal: a journal longer than one page (the pass reads
// it a page at a time) has every old undecided entry re-published once in
// one pass, and none again in the next.
func TestRedriveLongJournal(t *testing.T) {
	t.Parallel()
	const n = 1100
	f := newRedriveSaleOf(t, 11, 12, n)
	old := f.now.Add(-time.Minute)
	for i := range n {
		f.reserve(fmt.Sprintf("s%d", i), int64(i+1), old)
	}
	writer := event.NewWriter(event.WriterConfig{Brokers: f.k.Brokers, Topic: f.topic})
	defer writer.Close()
	rd := NewRedriver(RedriveConfig{After: 30 * time.Second}, RedriveDeps{Orders: f.orders, Stock: f.st, Events: writer,
		Locker: lock.New(f.r.Client, f.r.Prefix), Metrics: telemetry.NewMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NowFunc: func() time.Time { return f.now }, TickFunc: func() time.Time { return f.now }})
	res, err := rd.runOnce(f.ctx)
	if err != nil || res.Republished != n || res.Entries != n || res.Items != 1 {
		t.Fatalf("pass %+v %v; want %d re-published of the item's %d entries", res, err, n, n)
	}
	if res, err := rd.runOnce(f.ctx); err != nil || res.Republished != 0 {
		t.Errorf("second pass %+v %v; want nothing re-published", res, err)
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

// redriveSale is a sale in Postgres and Redis for the redrive's tests.
type redriveSale struct {
	ctx     context.Context
	db      testenv.Database
	r       testenv.Redis
	k       testenv.Kafka
	topic   string
	orders  *order.Store
	st      *stock.Store
	it      stock.Item
	now     time.Time
	reserve func(rid string, user int64, at time.Time) event.OrderRequested
}

func newRedriveSale(t *testing.T, act, itemID int64) redriveSale {
	return newRedriveSaleOf(t, act, itemID, 10)
}

// newRedriveSaleOf is newRedriveSale with units in stock.
func newRedriveSaleOf(t *testing.T, act, itemID, units int64) redriveSale {
	db, r, k := testenv.MustDatabase(t), testenv.MustRedis(t), testenv.MustKafka(t)
	ctx := context.Background()
	topic := testenv.UniqueName("orders.requested.")
	if err := event.EnsureTopics(ctx, k.Brokers, 1, 0, topic); err != nil {
		t.Fatal(err)
	}
	orders, st := order.NewStore(db.Pool), stock.New(r.Client, r.Prefix)
	it := stock.Item{ActivityID: act, ItemID: itemID}
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := order.Activity{ID: act, Name: "redrive", StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour), PerUserLimit: 1,
		Items: []order.ItemStock{{ItemID: itemID, InitialStock: units}}}
	if err := orders.UpsertActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: units, StartsAt: a.StartsAt, EndsAt: a.EndsAt, Cap: 1}); err != nil {
		t.Fatal(err)
	}
	reserve := func(rid string, user int64, at time.Time) event.OrderRequested {
		t.Helper()
		ev := event.OrderRequested{RequestID: rid, OrderNo: fmt.Sprintf("%d-%d-%s", act, itemID, rid), UserID: user, ActivityID: act,
			ItemID: itemID, Quantity: 1, ReservedAt: at}
		res, err := st.Reserve(ctx, stock.Reservation{Item: it, RequestID: rid, OrderNo: ev.OrderNo, UserID: user, Quantity: 1,
			Fingerprint: rid, Event: ev.Marshal()})
		if err != nil || res.Outcome != stock.Reserved {
			t.Fatalf("reserving %s: %v %v", rid, res.Outcome, err)
		}
		return ev
	}
	return redriveSale{ctx: ctx, db: db, r: r, k: k, topic: topic, orders: orders, st: st, it: it, now: now, reserve: reserve}
}

// TestRedriveDespiteClockSkew: a reservation stamped by a gateway whose
// clock runs 3 h ahead of the worker's (reservedAt in the future) is
// re-published once it has been in the journal for After by the worker's
// own measure, not 3 h later; and a step back of the worker's wall clock
// after a republish does not stretch the backoff by the step.
func TestRedriveDespiteClockSkew(t *testing.T) {
	t.Parallel()
	f := newRedriveSale(t, 7, 8)
	f.reserve("ahead", 1, f.now.Add(3*time.Hour))
	writer := event.NewWriter(event.WriterConfig{Brokers: f.k.Brokers, Topic: f.topic})
	defer writer.Close()
	wall, tick := f.now, f.now
	rd := NewRedriver(RedriveConfig{After: 30 * time.Second}, RedriveDeps{Orders: f.orders, Stock: f.st, Events: writer,
		Locker: lock.New(f.r.Client, f.r.Prefix), Metrics: telemetry.NewMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NowFunc: func() time.Time { return wall }, TickFunc: func() time.Time { return tick }})
	pass := func(want int, what string) {
		t.Helper()
		res, err := rd.runOnce(f.ctx)
		if err != nil || res.Republished != want {
			t.Fatalf("%s: pass %+v %v; want %d republished", what, res, err, want)
		}
	}
	pass(0, "first sight")
	wall, tick = wall.Add(20*time.Second), tick.Add(20*time.Second)
	pass(0, "seen for 20 s")
	wall, tick = wall.Add(11*time.Second), tick.Add(11*time.Second)
	pass(1, "seen for 31 s, stamped 3 h ahead")

	wall = wall.Add(-3 * time.Hour) // the worker's wall clock steps back
	tick = tick.Add(5 * time.Second)
	pass(0, "within the backoff")
	tick = tick.Add(time.Minute)
	pass(1, "past the backoff, the wall clock 3 h back")
}

// TestRedriveWaitsForReplicas: with REDIS_WAIT_REPLICAS the redrive
// publishes only journal entries a failover would keep. An entry on the
// primary alone — a reserve whose WAIT has not answered, stamped by a
// gateway whose clock runs 10 min behind, so it looks stranded at once —
// must not reach Kafka: after a failover that loses it the worker would
// make an order of its event (the journal no longer holds it), while the
// gateway answered 503 and the client's retry reserved a second orderNo.
// Once a replica has it, it is published.
func TestRedriveWaitsForReplicas(t *testing.T) {
	pair := testenv.MustRedisPair(t)
	db, k := testenv.MustDatabase(t), testenv.MustKafka(t)
	ctx := context.Background()
	topic := testenv.UniqueName("orders.requested.")
	if err := event.EnsureTopics(ctx, k.Brokers, 1, 0, topic); err != nil {
		t.Fatal(err)
	}
	rdb := pair.Primary.Client(t)
	orders, st := order.NewStore(db.Pool), stock.New(rdb, "")
	// Long enough for a healthy replica on two loaded cores.
	if err := st.WaitForReplicas(stock.ReplicaWait{Replicas: 1, Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	it := stock.Item{ActivityID: 11, ItemID: 12}
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := order.Activity{ID: 11, Name: "redrive", StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour), PerUserLimit: 1,
		Items: []order.ItemStock{{ItemID: 12, InitialStock: 10}}}
	if err := orders.UpsertActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: 10, StartsAt: a.StartsAt, EndsAt: a.EndsAt, Cap: 1}); err != nil {
		t.Fatal(err)
	}
	writer := event.NewWriter(event.WriterConfig{Brokers: k.Brokers, Topic: topic})
	defer writer.Close()
	rd := NewRedriver(RedriveConfig{After: 30 * time.Second}, RedriveDeps{Orders: orders, Stock: st, Events: writer,
		Locker: lock.New(rdb, ""), Metrics: telemetry.NewMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})

	pair.Replica.Pause(t)
	ev := event.OrderRequested{RequestID: "behind", OrderNo: "11-12-behind", UserID: 1, ActivityID: 11, ItemID: 12, Quantity: 1,
		ReservedAt: now.Add(-10 * time.Minute)}
	res, err := st.Reserve(ctx, stock.Reservation{Item: it, RequestID: ev.RequestID, OrderNo: ev.OrderNo, UserID: 1, Quantity: 1,
		Fingerprint: "behind", Event: ev.Marshal()})
	if err != nil || res.Outcome != stock.Reserved || !res.Unreplicated {
		pair.Replica.Resume(t)
		t.Fatalf("reserve with the replica paused: %+v %v, want RESERVED, unreplicated", res, err)
	}
	pass, err := rd.runOnce(ctx)
	pair.Replica.Resume(t)
	if !errors.Is(err, stock.ErrUnreplicated) || pass.Republished != 0 {
		t.Errorf("pass with the entry on the primary alone: %+v %v, want nothing republished, ErrUnreplicated", pass, err)
	}
	conn, err := kafka.DialLeader(ctx, "tcp", k.Brokers[0], topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if last, err := conn.ReadLastOffset(); err != nil || last != 0 {
		t.Errorf("the topic's end offset after that pass: %d %v, want 0 (nothing published)", last, err)
	}

	testenv.WaitFor(t, 15*time.Second, "a pass with the replica back to republish the entry", func() bool {
		pass, err = rd.runOnce(ctx)
		return err == nil && pass.Republished == 1
	})
}

// TestRedriveWaitsForTheGroupToPassABacklog: a stranded-looking entry is
// not republished while the workers' group has not consumed the orders
// topic past where it ended once the entry was old (its event may be in
// that backlog: a copy would only double the backlog); once the group has,
// it is. Without the group's position (a failed read) nothing
// is republished either.
func TestRedriveWaitsForTheGroupToPassABacklog(t *testing.T) {
	t.Parallel()
	f := newRedriveSale(t, 9, 10)
	writer := event.NewWriter(event.WriterConfig{Brokers: f.k.Brokers, Topic: f.topic})
	defer writer.Close()
	// A backlog: three events of other reservations nobody consumed yet.
	for i := range 3 {
		ev := event.OrderRequested{RequestID: fmt.Sprintf("backlog-%d", i), OrderNo: fmt.Sprintf("9-10-backlog-%d", i), UserID: int64(100 + i),
			ActivityID: 9, ItemID: 10, Quantity: 1, ReservedAt: f.now}
		if err := writer.WriteMessages(f.ctx, kafka.Message{Key: []byte("9:10"), Value: ev.Marshal()}); err != nil {
			t.Fatal(err)
		}
	}
	f.reserve("stranded", 1, f.now.Add(-time.Minute)) // a minute old when first seen
	g := newRedriveGroup(t, f)
	var failRead bool
	rd := NewRedriver(RedriveConfig{After: 30 * time.Second}, RedriveDeps{Orders: f.orders, Stock: f.st, Events: writer,
		Locker: lock.New(f.r.Client, f.r.Prefix), Metrics: telemetry.NewMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Offsets: func(ctx context.Context) (map[int]PartitionOffsets, error) {
			if failRead {
				return nil, errors.New("broker unreachable")
			}
			return g.offsets(ctx)
		}})
	pass := func(want, behind int, wantErr bool, what string) {
		t.Helper()
		res, err := rd.runOnce(f.ctx)
		if (err != nil) != wantErr || res.Republished != want || res.Behind != behind {
			t.Fatalf("%s: pass %+v, err %v; want %d republished, %d behind, an error: %v", what, res, err, want, behind, wantErr)
		}
	}
	pass(0, 1, false, "the group has consumed nothing of the backlog")
	g.commit(t, 2)
	pass(0, 1, false, "the group two of three into the backlog")
	g.commit(t, 3)
	failRead = true
	pass(0, 1, true, "the group's position unreadable")
	failRead = false
	pass(1, 0, false, "the group past the backlog")
}

// TestRedriveIgnoresTheEndReadBeforeTheEntry: an entry first seen by a
// pass that read where the topic ended before the entry's event was
// produced (the gateway reserved it during the pass; under a backlog a
// pass over the journal takes seconds) is not republished when the group
// passes that old end: its event is still ahead in the backlog. Only once
// the group has passed an end read after the entry had been in the
// journal for After is it republished. (make run under a closed loop at
// c=500 republished 14 725 such entries, each a copy in the backlog.)
func TestRedriveIgnoresTheEndReadBeforeTheEntry(t *testing.T) {
	t.Parallel()
	f := newRedriveSale(t, 13, 14)
	writer := event.NewWriter(event.WriterConfig{Brokers: f.k.Brokers, Topic: f.topic})
	defer writer.Close()
	g := newRedriveGroup(t, f)
	produce := func(ev event.OrderRequested) {
		t.Helper()
		if err := writer.WriteMessages(f.ctx, kafka.Message{Key: []byte("13:14"), Value: ev.Marshal()}); err != nil {
			t.Fatal(err)
		}
	}
	produce(event.OrderRequested{RequestID: "earlier", OrderNo: "13-14-earlier", UserID: 100, ActivityID: 13, ItemID: 14,
		Quantity: 1, ReservedAt: f.now}) // the backlog: offset 0
	clock := f.now
	rd := NewRedriver(RedriveConfig{After: 30 * time.Second}, RedriveDeps{Orders: f.orders, Stock: f.st, Events: writer,
		Locker: lock.New(f.r.Client, f.r.Prefix), Metrics: telemetry.NewMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NowFunc: func() time.Time { return clock }, TickFunc: func() time.Time { return clock },
		Offsets: g.offsets})
	pass := func(want, behind int, what string) {
		t.Helper()
		res, err := rd.runOnce(f.ctx)
		if err != nil || res.Republished != want || res.Behind != behind {
			t.Fatalf("%s: pass %+v, err %v; want %d republished, %d behind", what, res, err, want, behind)
		}
	}
	// A pass reads the end (1), then finds the entry a gateway has just
	// reserved; its produce lands after that read (offset 1).
	ev := f.reserve("late", 1, clock)
	pass(0, 0, "the entry first seen, young")
	produce(ev)
	g.commit(t, 1) // the group past the end the first pass read, not past the event
	clock = clock.Add(31 * time.Second)
	pass(0, 1, "After later, the group past the old end but not the entry's event")
	clock = clock.Add(5 * time.Second)
	pass(0, 1, "the next pass, the group where it was")
	g.commit(t, 2)
	pass(1, 0, "the group past the entry's event, and nobody decided it")
}

// redriveGroup is a workers' group on a redrive sale's topic that a test
// moves by hand (partition 0).
type redriveGroup struct {
	name, topic string
	client      *kafka.Client
}

func newRedriveGroup(t *testing.T, f redriveSale) redriveGroup {
	t.Helper()
	g := redriveGroup{name: testenv.UniqueName("group."), topic: f.topic,
		client: &kafka.Client{Addr: kafka.TCP(f.k.Brokers...), Timeout: 10 * time.Second}}
	// A real cluster's brokers may take a moment to answer for a fresh topic.
	testenv.WaitFor(t, 30*time.Second, "the fresh topic's offsets", func() bool {
		_, err := g.offsets(f.ctx)
		return err == nil
	})
	return g
}

func (g redriveGroup) offsets(ctx context.Context) (map[int]PartitionOffsets, error) {
	return GroupOffsets(ctx, g.client, g.topic, g.name)
}

func (g redriveGroup) commit(t *testing.T, offset int64) {
	t.Helper()
	_, err := g.client.OffsetCommit(context.Background(), &kafka.OffsetCommitRequest{GroupID: g.name, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{g.topic: {{Partition: 0, Offset: offset}}}})
	if err != nil {
		t.Fatal(err)
	}
}
