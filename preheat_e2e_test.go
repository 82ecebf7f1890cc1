package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

// A preheat that fails part-way leaves nothing on sale, and the stock
// layout (the bucket count) is fixed from the first preheat on: an item
// sells only once Redis and Postgres both record it as preheated with the
// same layout.

// putSale creates or replaces activity id with one item of units split
// over buckets, named name; the sale runs from a minute ago for an hour.
func (p *pipeline) putSale(tb testing.TB, id int64, name string, units int64, buckets int) error {
	tb.Helper()
	_, err := p.api().PutActivity(contractCtx(tb, "PUT /admin/v1/activities/{activityId}"), id, client.ActivityUpsert{Name: name,
		StartsAt: time.Now().Add(-time.Minute).UTC().Truncate(time.Second), EndsAt: time.Now().Add(time.Hour).UTC().Truncate(time.Second),
		PerUserLimit: 1, Items: []client.ItemUpsert{{ItemID: 1, Stock: units, Buckets: buckets}}})
	return err
}

// preheat is POST /admin/v1/activities/{id}/preheat through the typed client.
func (p *pipeline) preheat(tb testing.TB, id int64) error {
	tb.Helper()
	_, err := p.api().Preheat(contractCtx(tb, "preheat"), id)
	return err
}

// refused reports whether err is the gateway's answer status with code.
func refused(err error, status int, code client.Code) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Status == status && ce.Code == code
}

// orderAfterOutage sends user's order until the gateway answers something
// other than 503 (a dependency it needs for the answer is still coming
// back: nothing is reserved then) and returns that answer.
func (p *pipeline) orderAfterOutage(tb testing.TB, b orderBody) apiResponse {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := p.order(tb, b)
		if r.Status != http.StatusServiceUnavailable {
			return r
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s still answered 503 after 30 s: %v", b.RequestID, r.Body)
		}
		time.Sleep(250 * time.Millisecond) // a client's retry pace, under the per-user limit (5/s)
	}
}

// assertNotOnSale checks that users (routed over both buckets) are told
// NOT_ON_SALE and that nothing moved in Redis: the bucket stocks are still
// want, no journal entry, no marker, no sale hash.
func (p *pipeline) assertNotOnSale(tb testing.TB, it stock.Item, buckets int, want []int64, users []int64, tag string) {
	tb.Helper()
	for _, u := range users {
		r := p.orderAfterOutage(tb, orderBody{RequestID: fmt.Sprintf("%s-%d", tag, u), UserID: u, ActivityID: it.ActivityID, ItemID: it.ItemID, Quantity: 1})
		if r.Status != http.StatusNotFound || r.Code() != "NOT_ON_SALE" {
			tb.Errorf("user %d (bucket %d) ordered the item of a preheat that did not finish: %d %v, want 404 NOT_ON_SALE",
				u, stock.BucketOf(u, buckets), r.Status, r.Body)
		}
	}
	if got := p.bucketStocks(tb, it, buckets); !slices.Equal(got, want) {
		tb.Errorf("bucket stocks %v, want %v (unchanged)", got, want)
	}
	for b := range buckets {
		bi := it
		bi.Bucket = b
		if n := p.journalLen(tb, bi); n != 0 {
			tb.Errorf("bucket %d: %d journal entries", b, n)
		}
		if n := stocktest.CountMarkers(tb, p.StockRedis, bi); n != 0 {
			tb.Errorf("bucket %d: %d limit markers", b, n)
		}
		if v := stocktest.Sale(tb, p.StockRedis, bi); len(v) != 0 {
			tb.Errorf("bucket %d has a sale %v before the preheat finished", b, v)
		}
	}
}

// assertLayoutRefused tries to change the item's bucket count (and the
// activity's name with it) and expects 409 BUCKETS_FIXED with nothing
// changed in Postgres or Redis.
func (p *pipeline) assertLayoutRefused(tb testing.TB, it stock.Item, name string, units int64, buckets int) {
	tb.Helper()
	ctx := context.Background()
	keysBefore, stocksBefore := stocktest.ItemKeys(tb, p.StockRedis, it), p.bucketStocks(tb, it, buckets+2)
	before := p.dbStock(tb, it)
	if err := p.putSale(tb, it.ActivityID, "renamed", units, buckets+2); !refused(err, http.StatusConflict, "BUCKETS_FIXED") {
		tb.Errorf("changing the bucket count %d → %d after a preheat began: %v, want 409 BUCKETS_FIXED", buckets, buckets+2, err)
	}
	if after := p.dbStock(tb, it); after != before {
		tb.Errorf("a refused layout change changed the item in Postgres: %+v, was %+v", after, before)
	}
	if a, err := p.Orders.GetActivity(ctx, it.ActivityID); err != nil || a.Name != name {
		tb.Errorf("a refused layout change changed the activity: %+v %v", a, err)
	}
	if keys, stocks := stocktest.ItemKeys(tb, p.StockRedis, it), p.bucketStocks(tb, it, buckets+2); !slices.Equal(keys, keysBefore) || !slices.Equal(stocks, stocksBefore) {
		tb.Errorf("a refused layout change changed Redis: keys %v with stocks %v, were %v with %v", keys, stocks, keysBefore, stocksBefore)
	}
}

// assertSells orders once for each user, expects 202 each, waits for the
// worker and checks the invariants over the buckets.
func (p *pipeline) assertSells(tb testing.TB, it stock.Item, buckets int, users []int64) {
	tb.Helper()
	for _, u := range users {
		r := p.orderAfterOutage(tb, orderBody{RequestID: fmt.Sprintf("sell-%d", u), UserID: u, ActivityID: it.ActivityID, ItemID: it.ItemID, Quantity: 1})
		if r.Status != http.StatusAccepted {
			tb.Errorf("user %d after the preheat finished: %d %v, want 202", u, r.Status, r.Body)
		}
	}
	p.waitBucketsDrained(tb, it, buckets)
	testenv.WaitFor(tb, 30*time.Second, "every order in Postgres", func() bool {
		s := p.dbStock(tb, it)
		return s.InitialStock-s.Stock == int64(len(users))
	})
	p.assertBucketInvariants(tb, it, buckets)
	if v := stocktest.SaleField(tb, p.StockRedis, it.Base(), "buckets"); v != fmt.Sprint(buckets) {
		tb.Errorf("the sale's bucket count in Redis is %q, want %d (Postgres's)", v, buckets)
	}
}

// testPreheatMarkCutSellsNothing: the link to Postgres is cut while the
// preheat records the item preheated, after Redis was loaded. The answer
// is 503 and nothing sells — Postgres says the item was never preheated,
// so neither the reconciler, nor the lost-sale check, nor the mover would
// watch what Redis sold — and the bucket count can no longer change (a
// gateway that learnt the old count would route users to other buckets
// than a fresh one). Once Postgres is back, a new preheat finishes it and
// orders sell over the same layout.
func testPreheatMarkCutSellsNothing(t *testing.T, e engine) {
	t.Parallel()
	proxy := mustPostgresProxy(t)
	p := mustPipeline(t, e, components{"gateway", "worker"}, func(c *config) { viaPostgresProxy(c, proxy) })
	const act, units, buckets = 71, 10, 2
	it := stock.Item{ActivityID: act, ItemID: 1}
	if err := p.putSale(t, act, "marked", units, buckets); err != nil {
		t.Fatalf("creating the sale: %v", err)
	}
	// Whatever statement records the item preheated (sets preheated_at)
	// waits on an advisory lock the test holds, so the link is cut exactly
	// while that statement is in flight, and its backend ended before it
	// can go on.
	hold := ordertest.HoldPreheatMark(t, p.DB.Pool)
	defer hold.Close()
	answer := make(chan error, 1)
	go func() { answer <- p.preheat(t, act) }()
	var pid int32
	var got error
	answered := false
	testenv.WaitFor(t, 20*time.Second, "the mark to wait on the test's lock (or the preheat to answer)", func() bool {
		select {
		case got = <-answer:
			answered = true
			return true
		default:
		}
		var waiting bool
		pid, waiting = hold.Waiting()
		return waiting
	})
	proxy.Down()
	if pid != 0 {
		testenv.TerminateBackend(t, p.DB.Pool, pid)
	}
	hold.Release(t)
	if answered {
		t.Log("the preheat answered before its mark was seen waiting: the mark timed out instead")
	} else {
		got = <-answer
	}
	if !refused(got, http.StatusServiceUnavailable, "UNAVAILABLE") {
		t.Fatalf("preheat with Postgres cut while it records the item preheated: %v, want 503 UNAVAILABLE", got)
	}
	proxy.Up(t)
	hold.Drop(t)
	loaded := p.bucketStocks(t, it, buckets)
	users := append(usersIn(0, buckets, 3, 1), usersIn(1, buckets, 3, 1)...)
	p.assertNotOnSale(t, it, buckets, loaded, users, "early")
	p.assertLayoutRefused(t, it, "marked", units, buckets)
	if err := p.preheat(t, act); err != nil {
		t.Fatalf("preheat once Postgres is back: %v", err)
	}
	p.assertSells(t, it, buckets, users)
}

// testPreheatRedisCutFixesLayout: Redis is cut when a preheat begins, so
// the preheat answers 503 with nothing loaded; the bucket count is fixed
// all the same (409 BUCKETS_FIXED, nothing changed), so whatever part of
// that preheat reached Redis and every later one agree on it. With Redis
// back, a new preheat finishes the sale over that count.
func testPreheatRedisCutFixesLayout(t *testing.T, e engine) {
	t.Parallel()
	proxy := testenv.MustProxy(t, testenv.RedisAddr())
	p := mustPipeline(t, e, components{"gateway", "worker"}, func(c *config) {
		c.Redis.Addr = proxy.Addr
		c.BreakerOpenFor = 200 * time.Millisecond
		c.Redis.Timeout = 500 * time.Millisecond
	})
	const act, units, buckets = 72, 12, 3
	it := stock.Item{ActivityID: act, ItemID: 1}
	if err := p.putSale(t, act, "cut", units, buckets); err != nil {
		t.Fatalf("creating the sale: %v", err)
	}
	proxy.Down()
	if err := p.preheat(t, act); !refused(err, http.StatusServiceUnavailable, "UNAVAILABLE") {
		t.Fatalf("preheat with Redis cut: %v, want 503 UNAVAILABLE", err)
	}
	proxy.Up(t)
	var users []int64
	for b := range buckets {
		users = append(users, usersIn(b, buckets, 2, 1)...)
	}
	p.assertNotOnSale(t, it, buckets, []int64{-1, -1, -1}, users, "early")
	p.assertLayoutRefused(t, it, "cut", units, buckets)
	if err := p.preheat(t, act); err != nil {
		t.Fatalf("preheat once Redis is back: %v", err)
	}
	p.assertSells(t, it, buckets, users)
}
