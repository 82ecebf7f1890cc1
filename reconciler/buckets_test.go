package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
	"orderpipe/reconciler"
)

// bucketEnv is one bucketed sale item on real Postgres and Redis.
type bucketEnv struct {
	orders *order.Store
	st     *stock.Store
	sr     stocktest.Redis // st's client and prefix
	rdb    testenv.Redis
	fixer  *reconciler.Reconciler
	it     stock.Item
	a      order.Activity
	B      int
}

func mustBucketEnv(tb testing.TB, units int64, buckets int) *bucketEnv {
	tb.Helper()
	db, r := testenv.MustDatabase(tb), testenv.MustRedis(tb)
	e := &bucketEnv{orders: order.NewStore(db.Pool), st: stock.New(r.Client, r.Prefix), sr: stocktest.On(r.Client, r.Prefix), rdb: r,
		it: stock.Item{ActivityID: 8, ItemID: 1}, B: buckets}
	ctx := context.Background()
	e.a = order.Activity{ID: 8, Name: "buckets", StartsAt: time.Now().Add(-time.Minute).Truncate(time.Millisecond),
		EndsAt: time.Now().Add(time.Hour).Truncate(time.Millisecond), PerUserLimit: 1,
		Items: []order.ItemStock{{ItemID: 1, InitialStock: units, Buckets: buckets}}}
	if err := e.orders.UpsertActivity(ctx, e.a); err != nil {
		tb.Fatal(err)
	}
	if _, err := e.st.Preheat(ctx, stock.Sale{Item: e.it, Stock: units, StartsAt: e.a.StartsAt, EndsAt: e.a.EndsAt,
		Cap: e.a.PerUserLimit, Buckets: buckets}); err != nil {
		tb.Fatal(err)
	}
	if err := e.orders.MarkPreheated(ctx, 8, 1); err != nil {
		tb.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e.fixer = reconciler.New(reconciler.Config{Fix: true, LockWait: 20 * time.Second},
		reconciler.Deps{Orders: e.orders, Stock: e.st, Locker: lock.New(r.Client, r.Prefix), Log: log})
	return e
}

// stocks is each bucket's Redis stock and the units taken and not given.
func (e *bucketEnv) stocks(tb testing.TB) (string, int64) {
	tb.Helper()
	out := stocktest.BucketStocks(tb, e.sr, e.it, e.B)
	ts, err := e.st.Transfers(context.Background(), e.it, e.B)
	if err != nil {
		tb.Fatal(err)
	}
	var transit int64
	for _, t := range ts {
		if !t.Given {
			transit += t.Units
		}
	}
	return fmt.Sprint(out), transit
}

// moveSaleWindow edits the activity's end in Postgres without a new
// preheat: the item drifts for a reason other than its stock.
func (e *bucketEnv) moveSaleWindow(tb testing.TB) {
	tb.Helper()
	e.a.EndsAt = e.a.EndsAt.Add(time.Minute)
	e.a.Items[0].Buckets = 0
	if err := e.orders.UpsertActivity(context.Background(), e.a); err != nil {
		tb.Fatal(err)
	}
}

// deadMover plays a mover that took units from bucket 0 for bucket 2 under
// the item's bucket lock and died (or stalled) before giving them; its lock
// has run out. It returns the mover's transfer and its fencing token.
func (e *bucketEnv) deadMover(tb testing.TB, units int64) (stock.Transfer, int64) {
	tb.Helper()
	ctx := context.Background()
	l, err := e.st.LockBuckets(ctx, e.it, e.B, time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tr := stock.Transfer{ID: "dead-mover", From: 0, To: 2, Units: units}
	if took, err := e.st.Take(ctx, e.it, tr, l.Fence()); err != nil || !took {
		tb.Fatalf("take: %v %v", took, err)
	}
	// Its TTL ran out (never renewed, never released).
	if err := e.rdb.Client.Del(ctx, e.rdb.Prefix+"lock:"+e.it.BucketLockName()).Err(); err != nil {
		tb.Fatal(err)
	}
	return tr, l.Fence()
}

// TestFixWithUnitsInTransit: 30 units in 3 buckets, a mover took 3 units
// from bucket 0 for bucket 2 and died before giving them, and the sale
// window was edited. The stock sums agree, so the fix leaves the stock as
// it is, but it finishes the transfer: bucket 2 must keep the 3 units it
// was given, and the check after the fix must be clean.
func TestFixWithUnitsInTransit(t *testing.T) {
	t.Parallel()
	e := mustBucketEnv(t, 30, 3)
	ctx := context.Background()
	e.deadMover(t, 3)
	e.moveSaleWindow(t)

	res, err := e.fixer.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Found.Items) != 1 || res.Found.Items[0].Drift != 0 || res.Found.Items[0].InTransit != 3 || res.Found.Items[0].Sale != "differs" {
		t.Fatalf("check before the fix: %+v; want drift 0, 3 in transit, sale differs", res.Found.Items)
	}
	if res.ExitCode() != reconciler.ExitClean || res.After == nil {
		t.Errorf("fix: exit %d, after %+v; want 0 and a clean check after", res.ExitCode(), res.After)
	}
	if len(res.Fixed) != 1 || res.Fixed[0].InTransit != 0 || res.Fixed[0].Drift != 0 || res.Fixed[0].Sale != "differs" {
		t.Errorf("the fix's report %+v; want what it read after finishing the transfer: none in transit, drift 0, sale differs", res.Fixed)
	}
	stocks, transit := e.stocks(t)
	if stocks != "[7 10 13]" || transit != 0 {
		t.Errorf("after the fix: buckets %s, %d in transit; want [7 10 13], 0 (30 units, the transfer finished)", stocks, transit)
	}
	if res, err := e.fixer.RunOnce(ctx); err != nil || res.ExitCode() != reconciler.ExitClean || res.After != nil {
		t.Errorf("next pass: exit %d, after %+v, %v; want clean with nothing to fix", res.ExitCode(), res.After, err)
	}
}

// TestStaleMoverAfterFix: the mover of TestFixWithUnitsInTransit was only
// paused (or cut off) and comes back after the fix took the item and
// finished its transfer: its give and any new take carry its old fencing
// token, and every bucket's script refuses them.
func TestStaleMoverAfterFix(t *testing.T) {
	t.Parallel()
	e := mustBucketEnv(t, 30, 3)
	ctx := context.Background()
	tr, old := e.deadMover(t, 3)
	e.moveSaleWindow(t)
	if res, err := e.fixer.RunOnce(ctx); err != nil || res.ExitCode() != reconciler.ExitClean {
		t.Fatalf("fix: exit %d, %v", res.ExitCode(), err)
	}
	if err := e.st.Finish(ctx, e.it, tr, old); !errors.Is(err, lock.ErrStaleFence) {
		t.Errorf("the stale mover's give: %v, want %v", err, lock.ErrStaleFence)
	}
	if _, err := e.st.Take(ctx, e.it, stock.Transfer{ID: "late", From: 1, To: 0, Units: 5}, old); !errors.Is(err, lock.ErrStaleFence) {
		t.Errorf("the stale mover's take: %v, want %v", err, lock.ErrStaleFence)
	}
	if stocks, transit := e.stocks(t); stocks != "[7 10 13]" || transit != 0 {
		t.Errorf("after the stale mover: buckets %s, %d in transit; want [7 10 13], 0", stocks, transit)
	}
	if res, err := e.fixer.RunOnce(ctx); err != nil || res.ExitCode() != reconciler.ExitClean || res.After != nil {
		t.Errorf("check after the stale mover: exit %d, after %+v, %v; want clean", res.ExitCode(), res.After, err)
	}
}

// TestFixWaitsForMover: while a mover holds the item's bucket lock, a fix
// does not touch the item's buckets: with a wait shorter than the move it
// gives up on the item (an error, nothing written); once the mover is done,
// the next fix repairs it.
func TestFixWaitsForMover(t *testing.T) {
	t.Parallel()
	e := mustBucketEnv(t, 30, 3)
	ctx := context.Background()
	b1 := stocktest.KeysOf(e.sr, stock.Item{ActivityID: 8, ItemID: 1, Bucket: 1})
	if err := e.rdb.Client.IncrBy(ctx, b1.Stock, 4).Err(); err != nil {
		t.Fatal(err)
	}
	holding, done := make(chan struct{}), make(chan struct{})
	moverErr := make(chan error, 1)
	go func() {
		moverErr <- e.st.WithBuckets(ctx, e.it, e.B, time.Second, func(context.Context, int64) error {
			close(holding)
			<-done
			return nil
		})
	}()
	<-holding
	impatient := reconciler.New(reconciler.Config{Fix: true, LockWait: 50 * time.Millisecond, Attempts: 1},
		reconciler.Deps{Orders: e.orders, Stock: e.st, Locker: lock.New(e.rdb.Client, e.rdb.Prefix),
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	res, err := impatient.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Fixed) != 1 || !strings.Contains(res.Fixed[0].Error, lock.ErrNotAcquired.Error()) || res.ExitCode() != reconciler.ExitDrift {
		t.Errorf("fix while the mover holds the item: exit %d, fixed %+v; want the item not acquired and the drift left", res.ExitCode(), res.Fixed)
	}
	if stocks, _ := e.stocks(t); stocks != "[10 14 10]" {
		t.Errorf("buckets %s while the mover held them, want [10 14 10] untouched", stocks)
	}
	close(done)
	if err := <-moverErr; err != nil {
		t.Fatal(err)
	}
	if res, err := e.fixer.RunOnce(ctx); err != nil || res.ExitCode() != reconciler.ExitClean {
		t.Fatalf("fix after the mover: exit %d, %v", res.ExitCode(), err)
	}
	if stocks, _ := e.stocks(t); stocks != "[10 10 10]" {
		t.Errorf("after the fix: buckets %s, want [10 10 10]", stocks)
	}
}
