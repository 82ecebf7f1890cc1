// Command reconcilepass times reconciler passes over one sale of BUYERS
// live orders while the Redis beside it holds millions of unrelated keys
// (what earlier sales and `make run` leave): bench/reconcile-keys.sh runs
// it. It owns the Postgres database and the Redis it is given: it migrates
// the one and flushes the other.
//
//	reconcilepass -buyers 100000 -keys 1000000,10000000 -passes 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"orderpipe/pkg/database"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/reconciler"
)

func main() {
	buyers := flag.Int("buyers", 100000, "live orders of the sale, one per buyer")
	keyList := flag.String("keys", "0,1000000,10000000", "unrelated keys beside the sale (totals, ascending), one measurement each")
	passes := flag.Int("passes", 3, "passes per measurement (the median is reported)")
	flag.Parse()
	if err := run(context.Background(), *buyers, *keyList, *passes); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, buyers int, keyList string, passes int) error {
	pool, err := database.Open(ctx, os.Getenv("DATABASE_URL"), 8)
	if err != nil {
		return err
	}
	if _, err := database.Migrate(ctx, pool); err != nil {
		return err
	}
	rdb, err := redisconn.Config{Addr: os.Getenv("REDIS_ADDR")}.New(redisconn.Options{PoolSize: 64, ReadTimeout: time.Minute})
	if err != nil {
		return err
	}
	orders, st, sr := order.NewStore(pool), stock.New(rdb, ""), stocktest.On(rdb, "")
	if err := stocktest.Flush(ctx, sr); err != nil {
		return err
	}
	if err := openSale(ctx, orders, st, buyers); err != nil {
		return err
	}
	start := time.Now()
	placeOrders(ctx, orders, st, buyers)
	fmt.Printf("sale: %d buyers, live orders and markers, set up in %s\n", buyers, time.Since(start).Round(time.Second))

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := reconciler.New(reconciler.Config{}, reconciler.Deps{Orders: orders, Stock: st, Locker: lock.New(rdb, ""), Log: quiet})
	base, err := stocktest.KeyCount(ctx, sr)
	if err != nil {
		return err
	}
	for _, s := range strings.Split(keyList, ",") {
		extra, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return err
		}
		if err := measure(ctx, rec, sr, base, extra, passes); err != nil {
			return err
		}
	}
	return nil
}

// sale is the one item every buyer orders once.
var sale = stock.Item{ActivityID: 1, ItemID: 1}

// openSale creates the sale of one unit per buyer and preheats it, as the
// admin API would.
func openSale(ctx context.Context, orders *order.Store, st *stock.Store, buyers int) error {
	a := order.Activity{ID: 1, Name: "bench", StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(2 * time.Hour), PerUserLimit: 1,
		Items: []order.ItemStock{{ItemID: 1, InitialStock: int64(buyers)}}}
	if err := orders.UpsertActivity(ctx, a); err != nil {
		return err
	}
	if _, err := st.Preheat(ctx, stock.Sale{Item: sale, Stock: int64(buyers), StartsAt: a.StartsAt, EndsAt: a.EndsAt, Cap: 1}); err != nil {
		return err
	}
	return orders.MarkPreheated(ctx, 1, 1)
}

// placeOrders gives every buyer a live order the way the pipeline does
// (reserve, claim, decide, ack), in batches of a thousand on four
// goroutines: a pass then finds one live order and one limit marker per buyer.
func placeOrders(ctx context.Context, orders *order.Store, st *stock.Store, buyers int) {
	const batch = 1000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for lo := 1; lo <= buyers; lo += batch {
		wg.Add(1)
		sem <- struct{}{}
		go func(lo int) {
			defer wg.Done()
			defer func() { <-sem }()
			// A sale set up halfway has nothing worth measuring.
			if err := placeBatch(ctx, orders, st, lo, min(lo+batch, buyers+1)); err != nil {
				log.Fatal(err)
			}
		}(lo)
	}
	wg.Wait()
}

// placeBatch places the orders of users lo..hi-1.
func placeBatch(ctx context.Context, orders *order.Store, st *stock.Store, lo, hi int) error {
	var reqs []order.Request
	var refs []stock.Ref
	for u := lo; u < hi; u++ {
		rid := "r" + strconv.Itoa(u)
		ono := "1-1-" + rid
		ev := fmt.Sprintf(`{"requestId":%q,"orderNo":%q,"userId":%d,"activityId":1,"itemId":1,"quantity":1}`, rid, ono, u)
		res, err := st.Reserve(ctx, stock.Reservation{Item: sale, RequestID: rid, OrderNo: ono, UserID: int64(u), Quantity: 1,
			Fingerprint: rid, Event: []byte(ev)})
		if err != nil || res.Outcome != stock.Reserved {
			return fmt.Errorf("reserve %s: %s %v", rid, res.Outcome, err)
		}
		reqs = append(reqs, order.Request{RequestID: rid, OrderNo: ono, UserID: int64(u), ActivityID: 1, ItemID: 1, Quantity: 1,
			ReservedAt: time.Now().UTC(), Held: true})
		refs = append(refs, stock.Ref{RequestID: rid, OrderNo: ono})
	}
	if _, err := st.Claim(ctx, sale, refs); err != nil {
		return err
	}
	if _, err := orders.DecideBatch(ctx, reqs); err != nil {
		return err
	}
	_, err := st.Ack(ctx, sale, refs)
	return err
}

// measure brings Redis to extra unrelated keys and prints the median, min and
// max of passes reconciler passes; a pass that is not clean fails the run.
func measure(ctx context.Context, rec *reconciler.Reconciler, sr stocktest.Redis, base, extra int64, passes int) error {
	// DEBUG POPULATE n makes keys <prefix>0..n-1 exist (it skips those
	// that do), so n is the total: dedup-record lookalikes of another
	// sale, never matching a limit marker.
	if err := stocktest.PopulateLookalikes(ctx, sr, extra, stock.Item{ActivityID: 9, ItemID: 9}); err != nil {
		return err
	}
	n, _ := stocktest.KeyCount(ctx, sr)
	var took []time.Duration
	for range passes {
		t0 := time.Now()
		res, err := rec.RunOnce(ctx)
		took = append(took, time.Since(t0))
		if err != nil || res.ExitCode() != reconciler.ExitClean || len(res.Found.Items) != 1 {
			return fmt.Errorf("pass: exit %d, %v, %+v", res.ExitCode(), err, res.Found)
		}
	}
	slices.Sort(took)
	fmt.Printf("unrelated keys %9d (Redis holds %9d): pass median %8s  min %8s  max %8s\n",
		n-base, n, took[len(took)/2].Round(time.Millisecond), took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	return nil
}
