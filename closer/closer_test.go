package closer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"orderpipe/closer"
	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

const activityID = 7

// items of the test sale, each with initialStock units.
var items = []stock.Item{{ActivityID: activityID, ItemID: 1}, {ActivityID: activityID, ItemID: 2},
	{ActivityID: activityID, ItemID: 3}, {ActivityID: activityID, ItemID: 4}}

const initialStock = 1000

// env is a sale on a fresh database and a Redis key prefix.
type env struct {
	DB     testenv.Database
	Redis  testenv.Redis
	Orders *order.Store
	Stock  *stock.Store
	// StockRedis is Stock's client and prefix, for stocktest.
	StockRedis stocktest.Redis
}

// placed is an order persisted the way the worker does it.
type placed struct {
	Item      stock.Item
	RequestID string
	OrderNo   string
	UserID    int64
	Quantity  int
}

func mustEnv(tb testing.TB) env {
	tb.Helper()
	e := env{DB: testenv.MustDatabase(tb), Redis: testenv.MustRedis(tb)}
	e.Orders = order.NewStore(e.DB.Pool)
	e.Stock = stock.New(e.Redis.Client, e.Redis.Prefix)
	e.StockRedis = stocktest.On(e.Redis.Client, e.Redis.Prefix)
	ctx := context.Background()
	a := order.Activity{ID: activityID, Name: "closer test", StartsAt: time.Now().Add(-time.Hour), EndsAt: time.Now().Add(time.Hour), PerUserLimit: 3}
	for _, it := range items {
		a.Items = append(a.Items, order.ItemStock{ItemID: it.ItemID, InitialStock: initialStock})
	}
	if err := e.Orders.UpsertActivity(ctx, a); err != nil {
		tb.Fatal(err)
	}
	for _, it := range items {
		if _, err := e.Stock.Preheat(ctx, stock.Sale{Item: it, Stock: initialStock, StartsAt: a.StartsAt, EndsAt: a.EndsAt, Cap: 3}); err != nil {
			tb.Fatal(err)
		}
	}
	return e
}

// mustOrders reserves n orders in Redis (users 1..n, spread over the items,
// quantities 1–3), has them claimed and persisted as the worker does (held
// reservations, one transaction per item) and acks their journal entries.
func mustOrders(tb testing.TB, e env, n int) []placed {
	tb.Helper()
	ctx := context.Background()
	byItem := map[stock.Item][]placed{}
	var all []placed
	for i := range n {
		it := items[i%len(items)]
		p := placed{Item: it, RequestID: fmt.Sprintf("req-%d", i), OrderNo: fmt.Sprintf("%d-%d-o%d", it.ActivityID, it.ItemID, i),
			UserID: int64(i + 1), Quantity: 1 + i%3}
		now := time.Now()
		ev := event.OrderRequested{RequestID: p.RequestID, OrderNo: p.OrderNo, UserID: p.UserID, ActivityID: it.ActivityID,
			ItemID: it.ItemID, Quantity: p.Quantity, ReservedAt: now.UTC().Truncate(time.Microsecond)}
		res, err := e.Stock.Reserve(ctx, stock.Reservation{Item: it, RequestID: p.RequestID, OrderNo: p.OrderNo, UserID: p.UserID,
			Quantity: p.Quantity, Fingerprint: "fp", Event: ev.Marshal()})
		if err != nil || res.Outcome != stock.Reserved {
			tb.Fatalf("reserving %s: %+v %v", p.RequestID, res, err)
		}
		byItem[it] = append(byItem[it], p)
		all = append(all, p)
	}
	for it, ps := range byItem {
		refs := make([]stock.Ref, len(ps))
		reqs := make([]order.Request, len(ps))
		for i, p := range ps {
			refs[i] = stock.Ref{RequestID: p.RequestID, OrderNo: p.OrderNo}
			reqs[i] = order.Request{RequestID: p.RequestID, OrderNo: p.OrderNo, UserID: p.UserID, ActivityID: it.ActivityID,
				ItemID: it.ItemID, Quantity: p.Quantity, ReservedAt: time.Now()}
		}
		claims, err := e.Stock.Claim(ctx, it, refs)
		if err != nil {
			tb.Fatal(err)
		}
		for i, c := range claims {
			if c != stock.ClaimOK {
				tb.Fatalf("claim of %s: %s", refs[i].RequestID, c)
			}
			reqs[i].Held = true
		}
		ds, err := e.Orders.DecideBatch(ctx, reqs)
		if err != nil {
			tb.Fatal(err)
		}
		for _, d := range ds {
			if d.Outcome != order.Created {
				tb.Fatalf("persisting %s: %s %s", d.RequestID, d.Outcome, d.Reason)
			}
		}
		if _, err := e.Stock.Ack(ctx, it, refs); err != nil {
			tb.Fatal(err)
		}
	}
	return all
}

// mustExpired is a sale with n orders (mustOrders) created an hour ago:
// each is past its payBy and the closer's to close.
func mustExpired(tb testing.TB, n int) (env, []placed) {
	tb.Helper()
	e := mustEnv(tb)
	ps := mustOrders(tb, e, n)
	mustAge(tb, e, ps...)
	return e, ps
}

// mustAge makes orders look created an hour ago.
func mustAge(tb testing.TB, e env, ps ...placed) {
	tb.Helper()
	nos := make([]string, len(ps))
	for i, p := range ps {
		nos[i] = p.OrderNo
	}
	ordertest.AgeOrders(tb, e.DB.Pool, time.Hour, nos...)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newCloser is a closer replica that closes orders unpaid for 30 minutes and
// retries compensations quickly.
func newCloser(e env, st *stock.Store, after func(context.Context, []order.Compensation) error) *closer.Closer {
	return closer.New(closer.Config{CloseAfter: 30 * time.Minute, BatchSize: 50, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond},
		closer.Deps{Orders: e.Orders, Stock: st, Log: quietLog(), AfterCommitFunc: after})
}

// mustSettle runs passes until no compensation is pending.
func mustSettle(tb testing.TB, c *closer.Closer) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := c.RunOnce(context.Background())
		if err != nil {
			tb.Fatalf("settling pass: %v", err)
		}
		if res.Pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d compensations still pending after 30s", res.Pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// snapshot is the sale's rows in Postgres.
func snapshot(tb testing.TB, e env) order.ActivitySnapshot {
	tb.Helper()
	snap, err := e.Orders.Snapshot(context.Background(), activityID)
	if err != nil {
		tb.Fatal(err)
	}
	return snap
}

// statuses is the status of each order of the sale, by orderNo.
func statuses(tb testing.TB, e env) map[string]string {
	tb.Helper()
	return statusesOf(snapshot(tb, e))
}

func statusesOf(snap order.ActivitySnapshot) map[string]string {
	out := map[string]string{}
	for _, o := range snap.Orders {
		out[o.OrderNo] = o.Status
	}
	return out
}

func redisStock(tb testing.TB, e env, it stock.Item) int64 {
	tb.Helper()
	return stocktest.MustStock(tb, e.StockRedis, it)
}

// redisStocks is each item's stock in Redis.
func redisStocks(tb testing.TB, e env) map[stock.Item]int64 {
	tb.Helper()
	out := map[stock.Item]int64{}
	for _, it := range items {
		out[it] = redisStock(tb, e, it)
	}
	return out
}

// fullStocks is each item's stock with every unit back.
func fullStocks() map[stock.Item]int64 {
	out := map[stock.Item]int64{}
	for _, it := range items {
		out[it] = initialStock
	}
	return out
}

// assertRedisStocks checks each item's stock in Redis against want; when
// says at what point of the test.
func assertRedisStocks(tb testing.TB, e env, want map[stock.Item]int64, when string) {
	tb.Helper()
	for _, it := range items {
		if rs := redisStock(tb, e, it); rs != want[it] {
			tb.Errorf("redis stock of %s %s = %d, want %d", it, when, rs, want[it])
		}
	}
}

// assertDBStocksFull checks that Postgres holds every unit of each item,
// as once every order is closed (whether or not Redis has its units back).
func assertDBStocksFull(tb testing.TB, e env, when string) {
	tb.Helper()
	for _, it := range items {
		s, err := e.Orders.ItemStockOf(context.Background(), it.ActivityID, it.ItemID)
		if err != nil {
			tb.Fatal(err)
		}
		if s.Stock != initialStock {
			tb.Errorf("db stock of %s %s = %d, want %d", it, when, s.Stock, initialStock)
		}
	}
}

// assertSettled checks, with nothing in flight, I1 and I6 in Postgres, one
// applied compensation per CLOSED order and none for the others, and I5:
// Redis stock equals DB stock, and limit markers are exactly the live orders'.
func assertSettled(tb testing.TB, e env, ps []placed) {
	tb.Helper()
	ctx := context.Background()
	snap := snapshot(tb, e)
	st := statusesOf(snap)
	type marker struct {
		item stock.Item
		user int64
	}
	live := map[stock.Item]int64{}
	liveReq := map[marker]string{} // limit marker → requestId
	for _, p := range ps {
		switch st[p.OrderNo] {
		case order.StatusUnpaid, order.StatusPaid:
			live[p.Item] += int64(p.Quantity)
			liveReq[marker{p.Item, p.UserID}] = p.RequestID
		case order.StatusClosed:
			if fate := stocktest.Fate(tb, e.StockRedis, p.Item, p.OrderNo); fate != "released:"+p.OrderNo {
				tb.Errorf("%s is CLOSED but its reservation fate is %q", p.OrderNo, fate)
			}
		default:
			tb.Errorf("%s: status %q", p.OrderNo, st[p.OrderNo])
		}
	}
	var badI6 int64
	closed := map[string]bool{} // orderNo → CLOSED
	for _, o := range snap.Orders {
		ok := o.Status == order.StatusUnpaid && !o.Paid && !o.Closed ||
			o.Status == order.StatusPaid && o.Paid && !o.Closed ||
			o.Status == order.StatusClosed && o.Closed && !o.Paid
		if !ok {
			badI6++
		}
		closed[o.OrderNo] = o.Status == order.StatusClosed
	}
	if badI6 != 0 {
		tb.Errorf("I6: %d orders whose status and paid_at/closed_at disagree", badI6)
	}
	var wrongComps int64
	comps := ordertest.Compensations(tb, e.DB.Pool)
	closedUnpaid := map[string]bool{} // orderNo → has a CLOSED_UNPAID compensation
	for _, c := range comps {
		if c.Reason == order.ReasonClosedUnpaid {
			closedUnpaid[c.OrderNo] = true
		}
		if !closed[c.OrderNo] {
			wrongComps++
		}
	}
	for no, isClosed := range closed {
		if isClosed && !closedUnpaid[no] {
			wrongComps++
		}
	}
	if wrongComps != 0 {
		tb.Errorf("%d orders/compensations where a CLOSED order lacks its CLOSED_UNPAID compensation or another has one", wrongComps)
	}
	pending, err := e.Orders.CountPendingCompensations(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if pending != 0 {
		tb.Errorf("%d compensations pending", pending)
	}
	for _, it := range items {
		s, err := e.Orders.ItemStockOf(ctx, it.ActivityID, it.ItemID)
		if err != nil {
			tb.Fatal(err)
		}
		if s.Stock < 0 || s.InitialStock != s.Stock+live[it] {
			tb.Errorf("I1 %s: initial %d != stock %d + live %d", it, s.InitialStock, s.Stock, live[it])
		}
		if rs := redisStock(tb, e, it); rs != s.Stock {
			tb.Errorf("I5 %s: redis stock %d != db stock %d", it, rs, s.Stock)
		}
	}
	markers := 0
	for _, it := range items {
		markers += stocktest.CountMarkers(tb, e.StockRedis, it)
	}
	if markers != len(liveReq) {
		tb.Errorf("I5: %d limit markers for %d live orders", markers, len(liveReq))
	}
	for m, rid := range liveReq {
		if v := stocktest.MarkerOwner(tb, e.StockRedis, m.item, m.user); v != rid {
			tb.Errorf("I5: marker of user %d on %s = %q, want %s", m.user, m.item, v, rid)
		}
	}
}

// TestPayCloseRace races a pay with a closer pass on the same freshly expired
// order, 1,000 times: each ends PAID or CLOSED, never both; a successful pay
// means PAID, a refused one CLOSED; stock comes back for the CLOSED only.
func TestPayCloseRace(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	ps := mustOrders(t, e, 1000)
	closers := []*closer.Closer{newCloser(e, e.Stock, nil), newCloser(e, e.Stock, nil), newCloser(e, e.Stock, nil)}
	ctx := context.Background()

	var mu sync.Mutex
	paid := map[string]bool{}
	work := make(chan int)
	var wg sync.WaitGroup
	for lane := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := ps[i]
				ordertest.AgeOrders(offGoroutine{t}, e.DB.Pool, time.Hour, p.OrderNo)
				start := make(chan struct{})
				var race sync.WaitGroup
				race.Add(2)
				go func() {
					defer race.Done()
					<-start
					_, err := e.Orders.Pay(ctx, p.OrderNo)
					switch {
					case err == nil:
						mu.Lock()
						paid[p.OrderNo] = true
						mu.Unlock()
					case !errors.Is(err, order.ErrOrderClosed):
						t.Errorf("pay %s: %v", p.OrderNo, err)
					}
				}()
				go func() {
					defer race.Done()
					<-start
					if _, err := closers[(lane+i)%len(closers)].RunOnce(ctx); err != nil {
						t.Errorf("closer pass: %v", err)
					}
				}()
				close(start)
				race.Wait()
			}
		}()
	}
	for i := range ps {
		work <- i
	}
	close(work)
	wg.Wait()
	mustSettle(t, closers[0])

	st := statuses(t, e)
	var nPaid, nClosed int
	for _, p := range ps {
		switch st[p.OrderNo] {
		case order.StatusPaid:
			nPaid++
			if !paid[p.OrderNo] {
				t.Errorf("%s is PAID but its pay was refused", p.OrderNo)
			}
		case order.StatusClosed:
			nClosed++
			if paid[p.OrderNo] {
				t.Errorf("I6: %s was paid successfully but is CLOSED", p.OrderNo)
			}
		default:
			t.Errorf("%s ended %q, want PAID or CLOSED", p.OrderNo, st[p.OrderNo])
		}
	}
	t.Logf("%d paid, %d closed", nPaid, nClosed)
	assertSettled(t, e, ps)
}

// TestConcurrentClosers runs two replicas (own pools, own Redis clients) on
// 1,000 expired orders: each order is closed by exactly one of them and its
// stock restored once in Postgres and in Redis.
func TestConcurrentClosers(t *testing.T) {
	t.Parallel()
	e, ps := mustExpired(t, 1000)
	ctx := context.Background()

	type replica struct {
		c      *closer.Closer
		closed map[string]int // orderNo → times this replica committed its close
		total  int
	}
	var replicas [2]*replica
	for i := range replicas {
		pool, err := database.Open(ctx, e.DB.URL, 8)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		rdb := testenv.RedisClient(t, testenv.RedisAddr(), 0)
		r := &replica{closed: map[string]int{}}
		r.c = closer.New(closer.Config{CloseAfter: 30 * time.Minute, BatchSize: 25, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond},
			closer.Deps{Orders: order.NewStore(pool), Stock: stock.New(rdb, e.Redis.Prefix), Log: quietLog(),
				AfterCommitFunc: func(_ context.Context, comps []order.Compensation) error {
					for _, c := range comps {
						r.closed[c.OrderNo]++ // passes of one replica are sequential
					}
					return nil
				}})
		replicas[i] = r
	}
	var wg sync.WaitGroup
	for _, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := r.c.RunOnce(ctx)
				if err != nil {
					t.Errorf("closer pass: %v", err)
					return
				}
				r.total += res.Closed
				if res.Closed == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	mustSettle(t, replicas[0].c)

	a, b := replicas[0], replicas[1]
	t.Logf("replica A closed %d, replica B closed %d", a.total, b.total)
	if a.total+b.total != len(ps) {
		t.Errorf("replicas closed %d + %d orders, want %d in all", a.total, b.total, len(ps))
	}
	for _, p := range ps {
		if n := a.closed[p.OrderNo] + b.closed[p.OrderNo]; n != 1 {
			t.Errorf("%s closed %d times", p.OrderNo, n)
		}
	}
	var unclosed int
	for _, s := range statuses(t, e) {
		if s != order.StatusClosed {
			unclosed++
		}
	}
	if unclosed != 0 {
		t.Errorf("%d orders not CLOSED", unclosed)
	}
	assertDBStocksFull(t, e, "after the closes")
	assertRedisStocks(t, e, fullStocks(), "after the closes")
	assertSettled(t, e, ps)
}

// TestCrashAfterCommit: a closer that dies between its commit and Redis leaves
// pending compensations; the next pass applies each exactly once.
func TestCrashAfterCommit(t *testing.T) {
	t.Parallel()
	e, ps := mustExpired(t, 12)
	ctx := context.Background()
	redisBefore := redisStocks(t, e)

	crashing := newCloser(e, e.Stock, func(context.Context, []order.Compensation) error { return errors.New("injected crash") })
	res, err := crashing.RunOnce(ctx)
	if err == nil {
		t.Fatal("pass with an injected crash reported no error")
	}
	if res.Closed != len(ps) || res.Applied != 0 {
		t.Fatalf("crashed pass: %+v, want %d closed, 0 applied", res, len(ps))
	}
	pending, err := e.Orders.CountPendingCompensations(ctx)
	if err != nil || pending != int64(len(ps)) {
		t.Fatalf("pending compensations after the crash: %d %v, want %d", pending, err, len(ps))
	}
	assertRedisStocks(t, e, redisBefore, "before any compensation was applied")
	assertDBStocksFull(t, e, "after the commit")

	next := newCloser(e, e.Stock, nil)
	mustSettle(t, next)
	for range 3 { // more passes change nothing
		if _, err := next.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	assertRedisStocks(t, e, fullStocks(), "after more passes (restored exactly once)")
	assertSettled(t, e, ps)

	// The users may buy again.
	p := ps[0]
	ev := event.OrderRequested{RequestID: "again", OrderNo: "7-1-again", UserID: p.UserID, ActivityID: p.Item.ActivityID,
		ItemID: p.Item.ItemID, Quantity: 1, ReservedAt: time.Now().UTC()}
	r, err := e.Stock.Reserve(ctx, stock.Reservation{Item: p.Item, RequestID: ev.RequestID, OrderNo: ev.OrderNo, UserID: p.UserID,
		Quantity: 1, Fingerprint: "fp", Event: ev.Marshal()})
	if err != nil || r.Outcome != stock.Reserved {
		t.Errorf("user %d ordering again: %+v %v, want RESERVED", p.UserID, r, err)
	}
}

// TestRedisDown: compensations that cannot reach Redis stay pending and are
// applied, once, by a later pass after Redis is back.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	e, ps := mustExpired(t, 12)
	ctx := context.Background()
	redisBefore := redisStocks(t, e)

	dead := testenv.RedisClient(t, "127.0.0.1:1", 200*time.Millisecond)
	down := newCloser(e, stock.New(dead, e.Redis.Prefix), nil)
	res, err := down.RunOnce(ctx)
	if err != nil {
		t.Fatalf("a pass with Redis down must not fail (Postgres decided): %v", err)
	}
	if res.Closed != len(ps) || res.Applied != 0 || res.Failed != 1 || res.Pending != int64(len(ps)) {
		t.Fatalf("pass with redis down: %+v, want %d closed, 0 applied, 1 failed (then stop), %d pending", res, len(ps), len(ps))
	}
	var attempts int64
	var lastErr string
	for _, c := range ordertest.Compensations(t, e.DB.Pool) {
		attempts += int64(c.Attempts)
		lastErr = max(lastErr, c.LastError)
	}
	if attempts != 1 || lastErr == "" {
		t.Errorf("attempts %d, last error %q: want the one failure recorded", attempts, lastErr)
	}
	// Still down a while later: due retries fail again, one per pass.
	waitUntil(t, "a due retry while redis is down", func() bool {
		res, err := down.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Applied != 0 || res.Failed > 1 {
			t.Fatalf("pass with redis still down: %+v", res)
		}
		return res.Failed == 1
	})
	assertRedisStocks(t, e, redisBefore, "while redis was unreachable")

	up := newCloser(e, e.Stock, nil)
	mustSettle(t, up)
	assertRedisStocks(t, e, fullStocks(), "once redis is back")
	assertSettled(t, e, ps)
}

// TestRun: the loop closes on its own and returns when ctx ends.
func TestRun(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	ps := mustOrders(t, e, 4)
	c := closer.New(closer.Config{CloseAfter: 200 * time.Millisecond, Interval: 20 * time.Millisecond},
		closer.Deps{Orders: e.Orders, Stock: e.Stock, Log: quietLog()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitUntil(t, "every order closed and compensated", func() bool {
		n, err := e.Orders.CountPendingCompensations(context.Background())
		st := statuses(t, e)
		for _, p := range ps {
			if st[p.OrderNo] != order.StatusClosed {
				return false
			}
		}
		return err == nil && n == 0
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	assertSettled(t, e, ps)
}

// offGoroutine is t for a helper called on another goroutine, where a
// failure may only be reported (t.Errorf), not end the test.
type offGoroutine struct{ *testing.T }

func (t offGoroutine) Fatalf(format string, args ...any) { t.Errorf(format, args...) }

func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
