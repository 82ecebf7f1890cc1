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
	ctx := context.Background()
	pool, err := database.Open(ctx, os.Getenv("DATABASE_URL"), 8)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := database.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	rdb, err := redisconn.Config{Addr: os.Getenv("REDIS_ADDR")}.New(redisconn.Options{PoolSize: 64, ReadTimeout: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	orders, st, sr := order.NewStore(pool), stock.New(rdb, ""), stocktest.On(rdb, "")
	if err := stocktest.Flush(ctx, sr); err != nil {
		log.Fatal(err)
	}
	it := stock.Item{ActivityID: 1, ItemID: 1}
	a := order.Activity{ID: 1, Name: "bench", StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(2 * time.Hour), PerUserLimit: 1,
		Items: []order.ItemStock{{ItemID: 1, InitialStock: int64(*buyers)}}}
	if err := orders.UpsertActivity(ctx, a); err != nil {
		log.Fatal(err)
	}
	if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: int64(*buyers), StartsAt: a.StartsAt, EndsAt: a.EndsAt, Cap: 1}); err != nil {
		log.Fatal(err)
	}
	if err := orders.MarkPreheated(ctx, 1, 1); err != nil {
		log.Fatal(err)
	}

	start := time.Now()
	const batch = 1000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for lo := 1; lo <= *buyers; lo += batch {
		wg.Add(1)
		sem <- struct{}{}
		go func(lo int) {
			defer wg.Done()
			defer func() { <-sem }()
			var reqs []order.Request
			var refs []stock.Ref
			for u := lo; u < min(lo+batch, *buyers+1); u++ {
				rid := "r" + strconv.Itoa(u)
				ono := "1-1-" + rid
				ev := fmt.Sprintf(`{"requestId":%q,"orderNo":%q,"userId":%d,"activityId":1,"itemId":1,"quantity":1}`, rid, ono, u)
				res, err := st.Reserve(ctx, stock.Reservation{Item: it, RequestID: rid, OrderNo: ono, UserID: int64(u), Quantity: 1,
					Fingerprint: rid, Event: []byte(ev)})
				if err != nil || res.Outcome != stock.Reserved {
					log.Fatalf("reserve %s: %s %v", rid, res.Outcome, err)
				}
				reqs = append(reqs, order.Request{RequestID: rid, OrderNo: ono, UserID: int64(u), ActivityID: 1, ItemID: 1, Quantity: 1,
					ReservedAt: time.Now().UTC(), Held: true})
				refs = append(refs, stock.Ref{RequestID: rid, OrderNo: ono})
			}
			if _, err := st.Claim(ctx, it, refs); err != nil {
				log.Fatal(err)
			}
			if _, err := orders.DecideBatch(ctx, reqs); err != nil {
				log.Fatal(err)
			}
			if _, err := st.Ack(ctx, it, refs); err != nil {
				log.Fatal(err)
			}
		}(lo)
	}
	wg.Wait()
	fmt.Printf("sale: %d buyers, live orders and markers, set up in %s\n", *buyers, time.Since(start).Round(time.Second))

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := reconciler.New(reconciler.Config{}, reconciler.Deps{Orders: orders, Stock: st, Locker: lock.New(rdb, ""), Log: quiet})
	base, err := stocktest.KeyCount(ctx, sr)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range strings.Split(*keyList, ",") {
		extra, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			log.Fatal(err)
		}
		// DEBUG POPULATE n makes keys <prefix>0..n-1 exist (it skips those
		// that do), so n is the total: dedup-record lookalikes of another
		// sale, never matching a limit marker.
		if err := stocktest.PopulateLookalikes(ctx, sr, extra, stock.Item{ActivityID: 9, ItemID: 9}); err != nil {
			log.Fatal(err)
		}
		n, _ := stocktest.KeyCount(ctx, sr)
		var took []time.Duration
		for range *passes {
			t0 := time.Now()
			res, err := rec.RunOnce(ctx)
			took = append(took, time.Since(t0))
			if err != nil || res.ExitCode() != reconciler.ExitClean || len(res.Found.Items) != 1 {
				log.Fatalf("pass: exit %d, %v, %+v", res.ExitCode(), err, res.Found)
			}
		}
		slices.Sort(took)
		fmt.Printf("unrelated keys %9d (Redis holds %9d): pass median %8s  min %8s  max %8s\n",
			n-base, n, took[len(took)/2].Round(time.Millisecond), took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	}
}
