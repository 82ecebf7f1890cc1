package reconciler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/outbox"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
	"orderpipe/reconciler"
)

// env is one sale item on real Postgres and Redis, driven step by step the
// way the gateway, worker and closer drive it, without Kafka in between.
type env struct {
	pool    ordertest.DB // behind orders
	orders  *order.Store
	st      *stock.Store
	sr      stocktest.Redis // st's client and prefix
	rdb     testenv.Redis
	rec     *reconciler.Reconciler
	fixer   *reconciler.Reconciler
	it      stock.Item
	other   stock.Item
	metrics *telemetry.Metrics
	dbURL   string // the test's own database
}

func mustEnv(tb testing.TB, initial int64) *env {
	tb.Helper()
	db, r := testenv.MustDatabase(tb), testenv.MustRedis(tb)
	e := &env{pool: db.Pool, orders: order.NewStore(db.Pool), st: stock.New(r.Client, r.Prefix), sr: stocktest.On(r.Client, r.Prefix), rdb: r,
		it: stock.Item{ActivityID: 7, ItemID: 1}, other: stock.Item{ActivityID: 7, ItemID: 2}, metrics: telemetry.NewMetrics(), dbURL: db.URL}
	ctx := context.Background()
	a := order.Activity{ID: 7, Name: "test", StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour), PerUserLimit: 5,
		Items: []order.ItemStock{{ItemID: 1, InitialStock: initial}, {ItemID: 2, InitialStock: initial}}}
	if err := e.orders.UpsertActivity(ctx, a); err != nil {
		tb.Fatal(err)
	}
	for _, it := range []stock.Item{e.it, e.other} {
		if _, err := e.st.Preheat(ctx, stock.Sale{Item: it, Stock: initial, StartsAt: a.StartsAt, EndsAt: a.EndsAt, Cap: a.PerUserLimit}); err != nil {
			tb.Fatal(err)
		}
		if err := e.orders.MarkPreheated(ctx, it.ActivityID, it.ItemID); err != nil {
			tb.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	deps := reconciler.Deps{Orders: e.orders, Stock: e.st, Locker: lock.New(r.Client, r.Prefix), Metrics: e.metrics, Log: log}
	e.rec = reconciler.New(reconciler.Config{}, deps)
	e.fixer = reconciler.New(reconciler.Config{Fix: true}, deps)
	return e
}

// reserve runs the reserve script as the gateway does.
func (e *env) reserve(tb testing.TB, it stock.Item, rid string, user int64, q int) event.OrderRequested {
	tb.Helper()
	now := time.Now()
	ev := event.OrderRequested{RequestID: rid, OrderNo: fmt.Sprintf("%d-%d-%s", it.ActivityID, it.ItemID, rid), UserID: user,
		ActivityID: it.ActivityID, ItemID: it.ItemID, Quantity: q, ReservedAt: now.UTC().Truncate(time.Microsecond)}
	res, err := e.st.Reserve(context.Background(), stock.Reservation{Item: it, RequestID: rid, OrderNo: ev.OrderNo, UserID: user,
		Quantity: q, Fingerprint: rid, Event: ev.Marshal()})
	if err != nil || res.Outcome != stock.Reserved {
		tb.Fatalf("reserve %s: %v %v", rid, res.Outcome, err)
	}
	return ev
}

// decide claims and persists reservations as the worker does, without its
// ack and compensation step.
func (e *env) decide(tb testing.TB, evs ...event.OrderRequested) []order.Decision {
	tb.Helper()
	ctx := context.Background()
	var reqs []order.Request
	for _, ev := range evs {
		it := stock.Item{ActivityID: ev.ActivityID, ItemID: ev.ItemID}
		claims, err := e.st.Claim(ctx, it, []stock.Ref{{RequestID: ev.RequestID, OrderNo: ev.OrderNo}})
		if err != nil {
			tb.Fatal(err)
		}
		reqs = append(reqs, order.Request{RequestID: ev.RequestID, OrderNo: ev.OrderNo, UserID: ev.UserID, ActivityID: ev.ActivityID,
			ItemID: ev.ItemID, Quantity: ev.Quantity, ReservedAt: ev.ReservedAt, Held: claims[0] == stock.ClaimOK})
	}
	ds, err := e.orders.DecideBatch(ctx, reqs)
	if err != nil {
		tb.Fatal(err)
	}
	return ds
}

func (e *env) ack(tb testing.TB, ds ...order.Decision) {
	tb.Helper()
	for _, d := range ds {
		if d.Outcome != order.Created {
			tb.Fatalf("ack of %s decided %s", d.RequestID, d.Outcome)
		}
		if _, err := e.st.Ack(context.Background(), stock.Item{ActivityID: d.ActivityID, ItemID: d.ItemID},
			[]stock.Ref{{RequestID: d.RequestID, OrderNo: d.OrderNo}}); err != nil {
			tb.Fatal(err)
		}
	}
}

// applyPending applies every pending compensation as the sweeper does.
func (e *env) applyPending(tb testing.TB) {
	tb.Helper()
	comps, err := e.orders.PendingCompensations(context.Background(), -time.Hour, 1000)
	if err != nil {
		tb.Fatal(err)
	}
	a := &outbox.Applier{Orders: e.orders, Stock: e.st}
	if res, err := a.Apply(context.Background(), comps); err != nil || res.Failed > 0 {
		tb.Fatalf("applying compensations: %+v %v", res, err)
	}
}

// check runs one read-only pass and returns the item's line.
func (e *env) check(tb testing.TB, it stock.Item) reconciler.ItemReport {
	tb.Helper()
	res, err := e.rec.RunOnce(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range res.Found.Items {
		if r.Item() == it {
			if r.Error != "" {
				tb.Fatalf("checking %s: %s", it, r.Error)
			}
			return r
		}
	}
	tb.Fatalf("item %s not checked; report %+v", it, res.Found)
	return reconciler.ItemReport{}
}

// wantClean asserts the item has no drift and the given units in flight.
func (e *env) wantClean(tb testing.TB, it stock.Item, step string, inFlight int64) {
	tb.Helper()
	r := e.check(tb, it)
	if r.Drifted() || r.InFlight != inFlight {
		tb.Errorf("%s: drifted=%v drift=%d in flight=%d (want 0 drift, %d in flight); report %+v",
			step, r.Drifted(), r.Drift, r.InFlight, inFlight, r)
	}
}

func (e *env) redisStock(tb testing.TB, it stock.Item) int64 {
	tb.Helper()
	n, err := e.rdb.Client.Get(context.Background(), stocktest.KeysOf(e.sr, it).Stock).Int64()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestLifecycleIsNeverDrift walks reservations through every state the
// pipeline can leave them in and checks each is counted in flight exactly
// once (or not at all), never as drift.
func TestLifecycleIsNeverDrift(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	ctx := context.Background()
	e.wantClean(t, e.it, "fresh sale", 0)

	a := e.reserve(t, e.it, "a", 1, 2)
	e.wantClean(t, e.it, "reserved, not consumed", 2)

	da := e.decide(t, a)
	e.wantClean(t, e.it, "created, not acked", 0)
	e.ack(t, da...)
	e.wantClean(t, e.it, "created and acked", 0)

	// The closer closes it: DB stock is back, Redis not yet.
	comps, err := e.orders.CloseExpired(ctx, time.Nanosecond, 10)
	if err != nil || len(comps) != 1 {
		t.Fatalf("closing: %v %v", comps, err)
	}
	e.wantClean(t, e.it, "closed, compensation pending", 2)
	// The release runs but the process dies before marking it applied.
	if _, err := e.st.Release(ctx, stock.Compensation, stock.Release{Item: e.it, Ref: stock.Ref{RequestID: a.RequestID, OrderNo: a.OrderNo},
		UserID: a.UserID, Quantity: a.Quantity}); err != nil {
		t.Fatal(err)
	}
	e.wantClean(t, e.it, "released, not marked applied", 0)
	e.applyPending(t)
	e.wantClean(t, e.it, "compensation applied", 0)

	// A closed order that was never acked: its journal entry is dropped by
	// the release, and counted once meanwhile.
	b := e.reserve(t, e.it, "b", 2, 1)
	e.decide(t, b)
	if _, err := e.orders.CloseExpired(ctx, time.Nanosecond, 10); err != nil {
		t.Fatal(err)
	}
	e.wantClean(t, e.it, "closed before its ack", 1)
	e.applyPending(t)
	e.wantClean(t, e.it, "closed before its ack, released", 0)

	// The same requestId reused on another item: the worker gives the second
	// reservation back (a compensation for an entry still in the journal).
	c := e.reserve(t, e.it, "c", 3, 1)
	e.ack(t, e.decide(t, c)...)
	c2 := e.reserve(t, e.other, "c", 3, 1)
	if ds := e.decide(t, c2); ds[0].Outcome != order.Foreign {
		t.Fatalf("reused requestId decided %s", ds[0].Outcome)
	}
	e.wantClean(t, e.other, "reused requestId awaiting its compensation", 1)
	e.applyPending(t)
	e.wantClean(t, e.other, "reused requestId given back", 0)
	e.wantClean(t, e.it, "end", 0)
}

// TestRejectionCountedOnce: Redis sells a unit Postgres does not have; the
// drift is exactly that unit while the rejection awaits its compensation and
// after it is applied, never double counted.
func TestRejectionCountedOnce(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 1)
	e.ack(t, e.decide(t, e.reserve(t, e.it, "a", 1, 1))...)
	e.wantClean(t, e.it, "sold out", 0)
	stocktest.AddStock(t, e.sr, e.it, 1)
	e.wantDrift(t, "nudged", 1, 0)
	b := e.reserve(t, e.it, "b", 2, 1)
	e.wantDrift(t, "oversold reservation in flight", 1, 1)
	ds := e.decide(t, b)
	if ds[0].Outcome != order.Rejected || ds[0].Reason != order.ReasonDBStockMismatch {
		t.Fatalf("decided %s %s", ds[0].Outcome, ds[0].Reason)
	}
	e.wantDrift(t, "rejected, compensation pending", 1, 1)
	e.applyPending(t)
	e.wantDrift(t, "compensation applied", 1, 0)
}

func (e *env) wantDrift(tb testing.TB, step string, drift, inFlight int64) {
	tb.Helper()
	r := e.check(tb, e.it)
	if r.Drift != drift || r.InFlight != inFlight {
		tb.Errorf("%s: drift %d, in flight %d; want %d, %d", step, r.Drift, r.InFlight, drift, inFlight)
	}
}

// TestMarkers: a live order's missing marker, a marker nobody owns and a
// marker held by a stale request are reported and repaired; markers of
// reservations in flight are left alone.
func TestMarkers(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	ctx := context.Background()
	k := stocktest.KeysOf(e.sr, e.it)
	e.ack(t, e.decide(t, e.reserve(t, e.it, "a", 1, 1), e.reserve(t, e.it, "b", 2, 1), e.reserve(t, e.it, "c", 3, 1))...)
	e.reserve(t, e.it, "d", 4, 1) // in flight: its marker is legitimate
	e.wantClean(t, e.it, "before tampering", 1)

	c := e.rdb.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Del(ctx, k.Limit(1)).Err())                       // missing
	must(c.Set(ctx, k.Limit(2), "someone-else", 0).Err())    // wrong owner
	must(c.Set(ctx, k.Limit(99), "nobody", time.Hour).Err()) // extra
	// A marker only ever comes from a script, which indexes its user in the
	// same call (TestMarkersOfAnIncompleteIndex: one an older binary set).
	must(c.SAdd(ctx, k.MarkerIndex(), 99).Err())

	r := e.check(t, e.it)
	if !slices.Equal(r.MissingMarkers, []int64{1}) || !slices.Equal(r.WrongMarkers, []int64{2}) || !slices.Equal(r.ExtraMarkers, []int64{99}) {
		t.Errorf("markers: missing %v wrong %v extra %v; want [1] [2] [99]", r.MissingMarkers, r.WrongMarkers, r.ExtraMarkers)
	}
	if r.Drift != 0 || !r.Drifted() {
		t.Errorf("drift %d drifted %v; want 0, true", r.Drift, r.Drifted())
	}

	res, err := e.fixer.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode() != reconciler.ExitClean || res.After == nil {
		t.Fatalf("fix exit %d, after %+v", res.ExitCode(), res.After)
	}
	for user, want := range map[int64]string{1: "a", 2: "b", 3: "c", 4: "d"} {
		if got := c.Get(ctx, k.Limit(user)).Val(); got != want {
			t.Errorf("marker of user %d = %q, want %q", user, got, want)
		}
	}
	if n := c.Exists(ctx, k.Limit(99)).Val(); n != 0 {
		t.Errorf("extra marker survived the fix")
	}
	if ttl := c.TTL(ctx, k.Limit(1)).Val(); ttl <= time.Hour {
		t.Errorf("restored marker TTL %s; want the sale end + 1 day", ttl)
	}
	e.wantClean(t, e.it, "after the fix", 1)
}

// TestFixKeepsInFlight: the fix sets stock to DB stock minus what is in
// flight, so the reservations keep their units and settle without drift.
func TestFixKeepsInFlight(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	ctx := context.Background()
	k := stocktest.KeysOf(e.sr, e.it)
	a := e.reserve(t, e.it, "a", 1, 3)
	// Redis loses the stock key and the sale window, as after a failover.
	if err := e.rdb.Client.Del(ctx, k.Stock, k.Sale).Err(); err != nil {
		t.Fatal(err)
	}
	r := e.check(t, e.it)
	if r.StockKey != "missing" || r.Sale != "missing" || r.ExpectedRedisStock != 7 || r.Drift != -7 {
		t.Errorf("report %+v; want stock key and sale missing, expected 7, drift -7", r)
	}
	res, err := e.fixer.RunOnce(ctx)
	if err != nil || res.ExitCode() != reconciler.ExitClean {
		t.Fatalf("fix: exit %d, %v", res.ExitCode(), err)
	}
	if got := e.redisStock(t, e.it); got != 7 {
		t.Errorf("redis stock after fix %d, want 7", got)
	}
	// The gauges show what is left (nothing); that a repair was needed
	// stays in the metrics, or a --fix loop would hide every drift.
	repaired := func() (passes, item float64) {
		return testutil.ToFloat64(e.metrics.ReconcilerPasses.WithLabelValues("repaired")),
			testutil.ToFloat64(e.metrics.ReconcilerRepairs.WithLabelValues("7", "1"))
	}
	if p, n := repaired(); p != 1 || n != 1 {
		t.Errorf("after the repair: passes repaired %v, repairs of 7:1 %v; want 1, 1", p, n)
	}
	if got := testutil.ToFloat64(e.metrics.ReconcilerDrift.WithLabelValues("7", "1")); got != 0 {
		t.Errorf("drift gauge after the repair %v, want 0", got)
	}
	if ttl := e.rdb.Client.TTL(ctx, k.Stock).Val(); ttl <= 0 {
		t.Errorf("restored stock key has TTL %s, want the sale end + 1h", ttl)
	}
	e.wantClean(t, e.it, "fixed, reservation in flight", 3)
	e.ack(t, e.decide(t, a)...)
	e.wantClean(t, e.it, "reservation created", 0)
	if got := e.redisStock(t, e.it); got != 7 {
		t.Errorf("redis stock %d, want 7", got)
	}
	// A fix with nothing to do changes nothing.
	res, err = e.fixer.RunOnce(ctx)
	if err != nil || res.ExitCode() != reconciler.ExitClean || res.After != nil {
		t.Errorf("fix of a clean sale: exit %d, after %v, err %v", res.ExitCode(), res.After, err)
	}
	if p, n := repaired(); p != 1 || n != 1 {
		t.Errorf("after a clean pass: passes repaired %v, repairs of 7:1 %v; want them unchanged, 1, 1", p, n)
	}
}

// TestFixOutlastsADeadFixersLock: a fixer that died, or whose release a
// Redis failover lost, holds the fix lock until its TTL ends. The fix the
// failover calls for waits that out (by default a little longer than the
// TTL) instead of failing with the drift left, as it did after 10 s.
func TestFixOutlastsADeadFixersLock(t *testing.T) {
	e := mustEnv(t, 10)
	ctx := context.Background()
	k := stocktest.KeysOf(e.sr, e.it)
	if err := e.rdb.Client.Del(ctx, k.Stock).Err(); err != nil {
		t.Fatal(err)
	}
	const ttl = 11 * time.Second // longer than the old 10 s wait
	if _, err := lock.New(e.rdb.Client, e.rdb.Prefix).TryAcquire(ctx, reconciler.FixLockName, ttl); err != nil {
		t.Fatal(err) // never released, never renewed: its holder is gone
	}
	fixer := reconciler.New(reconciler.Config{Fix: true, LockTTL: ttl}, reconciler.Deps{Orders: e.orders, Stock: e.st,
		Locker: lock.New(e.rdb.Client, e.rdb.Prefix), Metrics: e.metrics, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	res, err := fixer.RunOnce(ctx)
	if err != nil || res.ExitCode() != reconciler.ExitClean {
		t.Fatalf("fix behind a dead fixer's lock: exit %d, %v; want it repaired once the lock expired", res.ExitCode(), err)
	}
	if got := e.redisStock(t, e.it); got != 10 {
		t.Errorf("redis stock after the fix %d, want 10", got)
	}
}

// TestStoppedFixLogsNoError: a loop stopped (SIGTERM) while its fix waits
// for the fix lock ends quietly: no ERROR or WARN line, nil from Run.
func TestStoppedFixLogsNoError(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	ctx, stop := context.WithCancel(context.Background())
	k := stocktest.KeysOf(e.sr, e.it)
	if err := e.rdb.Client.Del(ctx, k.Stock).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.New(e.rdb.Client, e.rdb.Prefix).TryAcquire(ctx, reconciler.FixLockName, time.Minute); err != nil {
		t.Fatal(err) // another fixer holds the lock: the fix waits
	}
	var logs testenv.SyncBuffer
	fixer := reconciler.New(reconciler.Config{Fix: true, Interval: time.Hour, LockWait: time.Minute}, reconciler.Deps{Orders: e.orders,
		Stock: e.st, Locker: lock.New(e.rdb.Client, e.rdb.Prefix), Metrics: e.metrics, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	done := make(chan error, 1)
	go func() { done <- fixer.Run(ctx) }()
	time.Sleep(2 * time.Second) // the pass (milliseconds) has found the drift and waits for the lock
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run stopped: %v, want nil", err)
	}
	out := logs.String()
	if !strings.Contains(out, "fixing drift stopped") {
		t.Errorf("no line says the fix stopped; log:\n%s", out)
	}
	if strings.Contains(out, "level=ERROR") || strings.Contains(out, "level=WARN") {
		t.Errorf("a stopped fix logged a warning or an error:\n%s", out)
	}
}

// TestNotPreheatedIsSkipped: an item Postgres does not know as preheated is
// not Redis's to hold.
func TestNotPreheatedIsSkipped(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	ctx := context.Background()
	ordertest.Unpreheat(t, e.pool, e.other.ActivityID, e.other.ItemID)
	res, err := e.rec.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Found.Items) != 1 || res.Found.Items[0].Item() != e.it {
		t.Errorf("checked %+v; want only %s", res.Found.Items, e.it)
	}
}

// TestLastSuccessGauge: a pass that checked every item stamps
// orderpipe_reconciler_last_success_timestamp_seconds (drift found is
// still a check done); a pass that could not run leaves it alone, so the
// stale-reconciliation alert fires once passes keep failing; the loop
// publishes its interval beside it.
func TestLastSuccessGauge(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	if got := testutil.ToFloat64(e.metrics.ReconcilerLastSuccess); got != 0 {
		t.Fatalf("last success %v before any pass, want 0", got)
	}
	before := float64(time.Now().Unix())
	e.wantClean(t, e.it, "clean", 0)
	first := testutil.ToFloat64(e.metrics.ReconcilerLastSuccess)
	if first < before || first > float64(time.Now().Unix()+1) {
		t.Fatalf("last success %v after a clean pass, want about now (%v)", first, before)
	}

	// Drift: Redis holds a unit Postgres does not know of.
	stocktest.AddStock(t, e.sr, e.it, 1)
	if r := e.check(t, e.it); !r.Drifted() {
		t.Fatalf("no drift after INCRBY: %+v", r)
	}
	if got := testutil.ToFloat64(e.metrics.ReconcilerLastSuccess); got < first {
		t.Errorf("last success %v after a pass that found drift, want ≥ %v", got, first)
	}

	// A pass that cannot reach Postgres is no success.
	dead, err := database.OpenLazy(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	m := telemetry.NewMetrics()
	broken := reconciler.New(reconciler.Config{Interval: 50 * time.Millisecond}, reconciler.Deps{Orders: order.NewStore(dead), Stock: e.st,
		Locker: lock.New(e.rdb.Client, e.rdb.Prefix), Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if _, err := broken.RunOnce(context.Background()); err == nil {
		t.Fatal("a pass without Postgres ran")
	}
	if got := testutil.ToFloat64(m.ReconcilerLastSuccess); got != 0 {
		t.Errorf("last success %v after a failed pass, want 0", got)
	}
	if got := testutil.ToFloat64(m.ReconcilerPasses.WithLabelValues("error")); got != 1 {
		t.Errorf("error passes %v, want 1", got)
	}

	// The loop says its interval.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := broken.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.ReconcilerInterval); got != 0.05 {
		t.Errorf("interval gauge %v, want 0.05", got)
	}
}

// TestLostSaleIsItsOwnGauge: Redis loses only an item's sale hash (the
// gateway then answers its orders 503): the unit drift reads 0, so the
// sale-drift gauge is what says it (OrderpipeSaleDrift); after the fix it
// reads 0 again.
func TestLostSaleIsItsOwnGauge(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	k := stocktest.KeysOf(e.sr, e.it)
	if err := e.rdb.Client.Del(context.Background(), k.Sale).Err(); err != nil {
		t.Fatal(err)
	}
	if r := e.check(t, e.it); r.Sale != "missing" || r.Drift != 0 {
		t.Fatalf("report %+v; want the sale missing and no unit drift", r)
	}
	a, i := strconv.FormatInt(e.it.ActivityID, 10), strconv.FormatInt(e.it.ItemID, 10)
	o := strconv.FormatInt(e.other.ItemID, 10)
	if got := testutil.ToFloat64(e.metrics.ReconcilerSaleDrift.WithLabelValues(a, i)); got != 1 {
		t.Errorf("sale drift gauge %v with the sale lost, want 1", got)
	}
	if got := testutil.ToFloat64(e.metrics.ReconcilerSaleDrift.WithLabelValues(a, o)); got != 0 {
		t.Errorf("sale drift gauge of the intact item %v, want 0", got)
	}
	if _, err := e.fixer.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(e.metrics.ReconcilerSaleDrift.WithLabelValues(a, i)); got != 0 {
		t.Errorf("sale drift gauge %v after the fix, want 0", got)
	}
}
