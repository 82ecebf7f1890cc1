package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"orderpipe/closer"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
	"orderpipe/reconciler"
)

// reconcile runs `orderpipe reconciler args...` against the pipeline's
// Postgres and Redis and returns its exit code and output.
func (p *pipeline) reconcile(tb testing.TB, args ...string) (int, string) {
	tb.Helper()
	var out bytes.Buffer
	code := runReconciler(context.Background(), testLog(), p.Cfg, args, &out)
	return code, out.String()
}

// reconcileJSON is reconcile with --json, decoded; item is the line of it in
// the final check (the one after the fix, if any).
func (p *pipeline) reconcileJSON(tb testing.TB, it stock.Item, args ...string) (int, reconciler.Result, reconciler.ItemReport) {
	tb.Helper()
	code, out := p.reconcile(tb, append(args, "--json")...)
	var res reconciler.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		tb.Fatalf("reconciler output is not JSON (exit %d): %v\n%s", code, err, out)
	}
	for _, r := range res.Final().Items {
		if r.Item() == it {
			return code, res, r
		}
	}
	tb.Fatalf("reconciler did not check %s:\n%s", it, out)
	return 0, res, reconciler.ItemReport{}
}

func testLog() *slog.Logger {
	if os.Getenv("TEST_LOG") != "" {
		return slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewJSONHandler(io.Discard, nil))
}

// snapshot is everything Postgres records of the activity.
func (p *pipeline) snapshot(tb testing.TB, activityID int64) order.ActivitySnapshot {
	tb.Helper()
	snap, err := p.Orders.Snapshot(context.Background(), activityID)
	if err != nil {
		tb.Fatal(err)
	}
	return snap
}

// testRedriveStrandedReservation: the gateway "dies" after the reserve
// script, before producing; the redrive publishes the journaled event and the
// order is created, exactly once.
func testRedriveStrandedReservation(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, func(c *config) {
		c.Worker.RedriveAfter = time.Second
		c.Worker.RedriveInterval = 100 * time.Millisecond
	})
	it := stock.Item{ActivityID: 1, ItemID: 10086}
	p.mustSale(t, 1, 5, map[int64]int64{10086: 10})
	now := time.Now()
	ev := event.OrderRequested{RequestID: "stranded-1", OrderNo: "1-10086-stranded1", UserID: 42, ActivityID: 1, ItemID: 10086,
		Quantity: 2, ReservedAt: now.UTC().Truncate(time.Microsecond)}
	msg := event.Message(context.Background(), ev)
	res, err := p.Stock.Reserve(context.Background(), stock.Reservation{Item: it, RequestID: ev.RequestID, OrderNo: ev.OrderNo,
		UserID: ev.UserID, Quantity: ev.Quantity, Fingerprint: "fp", Event: msg.Value})
	if err != nil || res.Outcome != stock.Reserved {
		t.Fatalf("reserve: %v %v", res.Outcome, err)
	}
	p.waitStatus(t, ev.OrderNo, order.StatusUnpaid) // the stranded reservation became an order
	p.waitDrained(t, it)
	snap := p.snapshot(t, it.ActivityID)
	orders, processed := 0, 0
	for _, o := range snap.Orders {
		if o.UserID == 42 {
			orders++
		}
	}
	for _, d := range snap.Decisions {
		if d.RequestID == "stranded-1" && d.Outcome == order.Created {
			processed++
		}
	}
	if orders != 1 {
		t.Errorf("%d orders for the stranded reservation, want 1", orders)
	}
	if processed != 1 {
		t.Errorf("%d processed rows, want 1", processed)
	}
	if s := p.dbStock(t, it); s.Stock != 8 {
		t.Errorf("db stock %d, want 8", s.Stock)
	}
	p.assertInvariants(t, it)
}

// testReconcilerCountsInFlight: reservations not yet consumed (no worker
// runs) and compensations the closer wrote but has not applied are in
// flight, not drift.
func testReconcilerCountsInFlight(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, nil)
	it := stock.Item{ActivityID: 2, ItemID: 1}
	p.mustSale(t, 2, 1, map[int64]int64{1: 10})
	for u := int64(1); u <= 3; u++ {
		if r := p.order(t, orderBody{RequestID: fmt.Sprintf("f-%d", u), UserID: u, ActivityID: 2, ItemID: 1, Quantity: 1}); r.Status != http.StatusAccepted {
			t.Fatalf("order: %d %v", r.Status, r.Body)
		}
	}
	code, _, r := p.reconcileJSON(t, it, "--once")
	if code != 0 || r.Drift != 0 || r.InFlight != 3 || r.InFlightReservations != 3 || *r.RedisStock != 7 || r.DBStock != 10 {
		t.Errorf("exit %d, report %+v; want exit 0, 3 in flight, redis 7, db 10, drift 0", code, r)
	}
	code, out := p.reconcile(t, "--once")
	if code != 0 || !strings.Contains(out, "0 drifted") {
		t.Errorf("table: exit %d\n%s", code, out)
	}
}

// testReconcilerCountsCloserCompensations: an order the closer closed whose
// compensation is not applied yet (the closer died after its commit) is in
// flight, not drift, and so is nothing once it is applied.
func testReconcilerCountsCloserCompensations(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	it := stock.Item{ActivityID: 4, ItemID: 1}
	p.mustSale(t, 4, 5, map[int64]int64{1: 10})
	r := p.mustAccept(t, orderBody{RequestID: "c-1", UserID: 9, ActivityID: 4, ItemID: 1, Quantity: 3})
	p.waitStatus(t, r.Str("orderNo"), order.StatusUnpaid)
	p.waitDrained(t, it)
	crashed := closer.New(closer.Config{CloseAfter: time.Nanosecond}, closer.Deps{Orders: p.Orders, Stock: p.Stock, Log: testLog(),
		AfterCommitFunc: func(context.Context, []order.Compensation) error { return fmt.Errorf("closer dies after its commit") }})
	if res, err := crashed.RunOnce(context.Background()); err == nil || res.Closed != 1 {
		t.Fatalf("closer pass: %+v %v; want 1 closed and the injected crash", res, err)
	}
	code, _, rep := p.reconcileJSON(t, it, "--once")
	if code != 0 || rep.InFlight != 3 || rep.PendingCompensations != 1 || rep.DBStock != 10 || *rep.RedisStock != 7 {
		t.Errorf("closed, not released: exit %d, report %+v; want exit 0, 3 in flight, db 10, redis 7", code, rep)
	}
	healthy := closer.New(closer.Config{CloseAfter: time.Nanosecond, RetryBase: time.Millisecond}, closer.Deps{Orders: p.Orders, Stock: p.Stock, Log: testLog()})
	testenv.WaitFor(t, 10*time.Second, "the closer to apply its compensation", func() bool {
		res, err := healthy.RunOnce(context.Background())
		return err == nil && res.Pending == 0
	})
	code, _, rep = p.reconcileJSON(t, it, "--once")
	if code != 0 || rep.InFlight != 0 || *rep.RedisStock != 10 || len(rep.MissingMarkers)+len(rep.ExtraMarkers) != 0 {
		t.Errorf("released: exit %d, report %+v; want exit 0, nothing in flight, redis 10", code, rep)
	}
	p.assertInvariants(t, it)
}

// testReconcilerNudgedStock: Redis stock moved behind the system's back is
// reported exactly and repaired.
func testReconcilerNudgedStock(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	it := stock.Item{ActivityID: 5, ItemID: 3}
	p.mustSale(t, 5, 1, map[int64]int64{3: 20})
	for u := int64(1); u <= 5; u++ {
		if r := p.order(t, orderBody{RequestID: fmt.Sprintf("n-%d", u), UserID: u, ActivityID: 5, ItemID: 3, Quantity: 1}); r.Status != http.StatusAccepted {
			t.Fatalf("order: %d %v", r.Status, r.Body)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "5 orders", func() bool { return ordertest.CountOrders(t, p.DB.Pool) == 5 })
	p.waitDrained(t, it)
	if code, out := p.reconcile(t, "--once"); code != 0 {
		t.Fatalf("before the nudge: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		name  string
		nudge int64
	}{{"Plus5", 5}, {"Minus5", -5}} {
		t.Run(tc.name, func(t *testing.T) {
			stocktest.AddStock(t, p.StockRedis, it, tc.nudge)
			code, _, r := p.reconcileJSON(t, it, "--once")
			if code != 1 || r.Drift != tc.nudge || !r.Drifted() {
				t.Errorf("exit %d, drift %d; want exit 1, drift %+d", code, r.Drift, tc.nudge)
			}
			code, out := p.reconcile(t, "--once")
			if want := fmt.Sprintf("%+d", tc.nudge); code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "DRIFT") {
				t.Errorf("table: exit %d, want it to show %s and DRIFT:\n%s", code, want, out)
			}
			code, out = p.reconcile(t, "--once", "--fix")
			if code != 0 {
				t.Errorf("fix: exit %d\n%s", code, out)
			}
			if got := p.redisStock(t, it); got != 15 {
				t.Errorf("redis stock after fix %d, want 15", got)
			}
			if code, out := p.reconcile(t, "--once"); code != 0 {
				t.Errorf("after fix: exit %d\n%s", code, out)
			}
		})
	}
	p.assertInvariants(t, it)
}

// testReconcilerRedisLoss: Redis loses every key of a sale mid-way, with
// reservations in flight. While Redis is wrong Postgres backstops (no
// oversell, one live order per user); the reconciler reports the drift and
// --fix repairs stock, sale window and limit markers.
func testReconcilerRedisLoss(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, nil) // the worker starts later
	it := stock.Item{ActivityID: 3, ItemID: 1}
	p.mustSale(t, 3, 1, map[int64]int64{1: 10})
	buy := func(rid string, user int64) apiResponse {
		t.Helper()
		return p.order(t, orderBody{RequestID: rid, UserID: user, ActivityID: 3, ItemID: 1, Quantity: 1})
	}
	for u := int64(1); u <= 6; u++ {
		if r := buy(fmt.Sprintf("before-%d", u), u); r.Status != http.StatusAccepted {
			t.Fatalf("order: %d %v", r.Status, r.Body)
		}
	}

	// Failover: every key of the sale is gone, the journal of the six
	// reservations with it (their events are in Kafka).
	ctx := context.Background()
	if n := stocktest.DropItem(t, p.StockRedis, it); n == 0 {
		t.Fatal("no keys to lose")
	}
	// The sale is preheated and on in Postgres: the gateway fails closed
	// (503, retry) rather than telling the client it is not on sale.
	if r := buy("during-loss", 50); r.Status != http.StatusServiceUnavailable || r.Code() != "UNAVAILABLE" {
		t.Errorf("order while the sale is lost: %d %v; want 503 UNAVAILABLE", r.Status, r.Body)
	}
	code, _, r := p.reconcileJSON(t, it, "--once")
	if code != 1 || r.StockKey != "missing" || r.Sale != "missing" || r.ExpectedRedisStock != 10 {
		t.Errorf("after the loss: exit %d, report %+v; want exit 1, stock key and sale missing, expected 10", code, r)
	}
	if code, out := p.reconcile(t, "--once"); code != 1 || !strings.Contains(out, "activity 3 item 1: stock key missing") {
		t.Errorf("table after the loss: exit %d\n%s", code, out)
	}
	if code, out := p.reconcile(t, "--once", "--fix"); code != 0 {
		t.Fatalf("first fix: exit %d\n%s", code, out)
	}

	// Redis now lets users 1-3 order again (their markers are lost) and
	// sells 10 more units than Postgres will have once the six lost
	// reservations are consumed.
	for u := int64(1); u <= 3; u++ {
		if r := buy(fmt.Sprintf("again-%d", u), u); r.Status != http.StatusAccepted {
			t.Fatalf("second order of user %d: %d %v", u, r.Status, r.Body)
		}
	}
	for u := int64(7); u <= 13; u++ {
		if r := buy(fmt.Sprintf("after-%d", u), u); r.Status != http.StatusAccepted {
			t.Fatalf("order of user %d: %d %v", u, r.Status, r.Body)
		}
	}

	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runComponents(wctx, testLog(), p.Cfg, components{"worker"}, nil) }()
	t.Cleanup(func() {
		stopWorker()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	testenv.WaitFor(t, 30*time.Second, "all 16 requests decided", func() bool {
		d, err := p.Orders.DrainOf(ctx, it.ActivityID)
		return err == nil && d.Decided == 16
	})
	p.waitDrained(t, it)

	// Postgres held: stock exactly sold out, one live order per user, the
	// surplus rejected.
	s := p.dbStock(t, it)
	snap := p.snapshot(t, it.ActivityID)
	live, users := 0, map[int64]bool{}
	for _, o := range snap.Orders {
		if o.Status == order.StatusUnpaid || o.Status == order.StatusPaid {
			live++
			users[o.UserID] = true
		}
	}
	reasons := map[string]int{}
	for _, d := range snap.Decisions {
		reasons[d.Reason]++
	}
	dup, short := reasons["DUPLICATE_LIVE_ORDER"], reasons["DB_STOCK_MISMATCH"]
	if s.Stock != 0 || live != 10 || len(users) != 10 || dup != 3 || short != 3 {
		t.Fatalf("db stock %d, %d live orders of %d users, %d duplicate and %d stock rejections; want 0, 10, 10, 3, 3",
			s.Stock, live, len(users), dup, short)
	}

	code, _, r = p.reconcileJSON(t, it, "--once")
	if code != 1 || r.Drift != 6 || r.InFlight != 0 || !slices.Equal(r.MissingMarkers, []int64{4, 5, 6}) ||
		len(r.ExtraMarkers)+len(r.WrongMarkers) != 0 {
		t.Errorf("after the backstop: exit %d, report %+v; want exit 1, drift +6, missing markers [4 5 6]", code, r)
	}
	code, res, r := p.reconcileJSON(t, it, "--once", "--fix")
	if code != 0 || len(res.Fixed) != 1 || r.Drifted() {
		t.Errorf("fix: exit %d, result %+v", code, res)
	}
	if got := p.redisStock(t, it); got != 0 {
		t.Errorf("redis stock after the fix %d, want 0", got)
	}
	for u := int64(4); u <= 6; u++ {
		if got, want := stocktest.MarkerOwner(t, p.StockRedis, it, u), fmt.Sprintf("before-%d", u); got != want {
			t.Errorf("marker of user %d = %q, want %q", u, got, want)
		}
	}
	if code, out := p.reconcile(t, "--once"); code != 0 {
		t.Errorf("after the fix: exit %d\n%s", code, out)
	}
	// The fix rebuilt the lost dedup records: a client retrying an accepted
	// request gets its first order number back, not a new reservation.
	var firstNo string
	for _, o := range p.snapshot(t, it.ActivityID).Orders {
		if o.RequestID == "before-4" {
			firstNo = o.OrderNo
		}
	}
	if firstNo == "" {
		t.Fatal("no order of request before-4")
	}
	if r := buy("before-4", 4); r.Status != http.StatusOK || r.Body["replayed"] != true || r.Str("orderNo") != firstNo {
		t.Errorf("retry after the fix: %d %v; want a replay of %s", r.Status, r.Body, firstNo)
	}
	p.assertInvariants(t, it)
}

// testReconcilerLoopDuringRace: the reconciler loop runs through a
// 2,000-buyer race and reports no drift at any pass, including passes that
// find hundreds of units reserved and not yet consumed.
func testReconcilerLoopDuringRace(t *testing.T, e engine) {
	t.Parallel()
	// The worker starts only halfway through, so passes certainly meet
	// reservations in flight (first half) and while they are consumed.
	p := mustPipeline(t, e, components{"gateway"}, nil)
	it := stock.Item{ActivityID: 6, ItemID: 1}
	const buyers, waves, units = 2000, 10, 500
	p.mustSale(t, 6, 1, map[int64]int64{1: units})

	cfg := p.Cfg
	cfg.Reconciler.Interval = 10 * time.Millisecond
	pr, pw := io.Pipe()
	rctx, stopRec := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() {
		exit <- runReconciler(rctx, testLog(), cfg, []string{"--json"}, pw)
		pw.Close()
	}()
	var (
		mu     sync.Mutex
		passes []reconciler.Result
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var res reconciler.Result
			if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
				t.Errorf("pass output is not JSON: %v", err)
				continue
			}
			mu.Lock()
			passes = append(passes, res)
			mu.Unlock()
		}
	}()
	passCount := func() int { mu.Lock(); defer mu.Unlock(); return len(passes) }
	testenv.WaitFor(t, 10*time.Second, "the first reconciler pass", func() bool { return passCount() > 0 })

	var wg sync.WaitGroup
	var accepted, soldOut, other sync.Map
	for w := 0; w < waves; w++ {
		if w == waves/2 {
			p.startWorker(t)
		}
		before := passCount()
		for b := w * buyers / waves; b < (w+1)*buyers/waves; b++ {
			wg.Add(1)
			go func(user int64) {
				defer wg.Done()
				r := p.order(t, orderBody{RequestID: fmt.Sprintf("race-%d", user), UserID: user, ActivityID: 6, ItemID: 1, Quantity: 1})
				switch {
				case r.Status == http.StatusAccepted:
					accepted.Store(user, true)
				case r.Code() == "SOLD_OUT":
					soldOut.Store(user, true)
				default:
					other.Store(user, fmt.Sprint(r.Status, r.Body))
				}
			}(int64(b + 1))
		}
		// The next wave starts only after two more passes, so passes run
		// while orders are being reserved and consumed.
		testenv.WaitFor(t, 30*time.Second, "two reconciler passes during the wave", func() bool { return passCount() >= before+2 })
	}
	wg.Wait()
	p.waitDrained(t, it)
	stopRec()
	if code := <-exit; code != 0 {
		t.Errorf("reconciler loop exited %d", code)
	}
	<-readDone

	size := func(m *sync.Map) (n int) { m.Range(func(_, _ any) bool { n++; return true }); return n }
	other.Range(func(u, v any) bool { t.Errorf("buyer %v: %v", u, v); return true })
	if a, s := size(&accepted), size(&soldOut); a != units || a+s != buyers {
		t.Errorf("%d accepted, %d sold out; want %d and %d", a, s, units, buyers-units)
	}
	var inFlightSeen, busy int64
	for i, res := range passes {
		if res.Found.Drifted() != 0 || res.Found.Errors() != 0 || len(res.Found.Items) != 1 {
			t.Errorf("pass %d: %d drifted, %d errors: %+v", i, res.Found.Drifted(), res.Found.Errors(), res.Found.Items)
		}
		for _, r := range res.Found.Items {
			inFlightSeen = max(inFlightSeen, r.InFlight)
			if r.InFlightReservations+r.PendingCompensations > 0 {
				busy++
			}
		}
	}
	if len(passes) < 2*waves {
		t.Errorf("%d passes, want at least %d", len(passes), 2*waves)
	}
	// Otherwise the race proved nothing about counting work in flight.
	if busy == 0 {
		t.Errorf("no pass met a reservation in flight")
	}
	t.Logf("%d passes, %d with work in flight, at most %d units in flight at one pass", len(passes), busy, inFlightSeen)
	if code, out := p.reconcile(t, "--once"); code != 0 {
		t.Errorf("after the race: exit %d\n%s", code, out)
	}
	p.assertInvariants(t, it)
}

// testReconcilerFixAfterRedisLostTheFence: a Redis restart without
// persistence loses the fix lock's fencing counter too, while Postgres keeps
// the newest token it saw. The next fix must still repair (its token starts
// above the recorded one), or the sale would never come back.
func testReconcilerFixAfterRedisLostTheFence(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, nil)
	it := stock.Item{ActivityID: 4, ItemID: 1}
	p.mustSale(t, 4, 1, map[int64]int64{1: 10})
	ctx := context.Background()
	for i := range 2 { // two drifted fixes: Postgres records token 2
		stocktest.SetStock(t, p.StockRedis, it, int64(3+i))
		if code, out := p.reconcile(t, "--once", "--fix"); code != 0 {
			t.Fatalf("fix %d: exit %d\n%s", i+1, code, out)
		}
	}
	if n, err := p.Orders.RecordedFence(ctx, reconciler.FixLockName); err != nil || n < 2 {
		t.Fatalf("recorded fence %d (%v), want at least 2", n, err)
	}

	// The restart: every key is gone, the fencing counter with them.
	testenv.DeleteKeys(ctx, p.Redis.Client, p.Redis.Prefix)
	if code, out := p.reconcile(t, "--once", "--fix"); code != 0 {
		t.Fatalf("fix after Redis lost everything: exit %d\n%s", code, out)
	}
	if got := p.redisStock(t, it); got != 10 {
		t.Errorf("redis stock after the fix %d, want 10", got)
	}
	if code, out := p.reconcile(t, "--once"); code != 0 {
		t.Errorf("after the fix: exit %d\n%s", code, out)
	}
}
