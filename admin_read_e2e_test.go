package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// testAdminReadsActivity: GET /admin/v1/activities/{id} counts each item's
// units in every state — one order PAID, one UNPAID, one CLOSED and one
// reservation in flight (no worker running) — from both stores; answers
// from Postgres alone with the Redis numbers null while Redis is down, and
// 503 while Postgres is.
func testAdminReadsActivity(t *testing.T, e engine) {
	t.Parallel()
	pgProxy := mustPostgresProxy(t)
	redisProxy := testenv.MustProxy(t, testenv.RedisAddr())
	p := mustPipeline(t, e, components{"gateway", "closer"}, func(c *config) {
		viaPostgresProxy(c, pgProxy)
		c.Redis.Addr = redisProxy.Addr
		c.Redis.Timeout = time.Second
		c.Closer.CloseAfter = 10 * time.Minute // only the order the test ages closes
		c.Closer.Interval = 100 * time.Millisecond
		c.Worker.RedriveAfter = time.Hour // the in-flight reservation stays unpublished again
	})
	ctx := context.Background()
	auth := []string{"Authorization", "Bearer " + p.Admin}
	// read is a GET with Postgres up: a 503 (the order store past its bound
	// on a busy machine) is asked again, up to five times a second apart.
	read := func(t *testing.T, path string) apiResponse {
		t.Helper()
		r := p.do(t, http.MethodGet, path, "", nil, auth...)
		for i := 1; i < 5 && r.Status == http.StatusServiceUnavailable; i++ {
			time.Sleep(time.Second)
			r = p.do(t, http.MethodGet, path, "", nil, auth...)
		}
		return r
	}
	it := stock.Item{ActivityID: 7, ItemID: 70}
	p.mustSale(t, 7, 2, map[int64]int64{70: 10, 71: 5})
	// Activity 8 is created but never preheated.
	if r := p.do(t, http.MethodPut, "/admin/v1/activities/8", "application/json", map[string]any{"name": "cold",
		"startsAt": time.Now().UTC(), "endsAt": time.Now().Add(time.Hour).UTC(), "items": []map[string]int64{{"itemId": 80, "stock": 3}}}, auth...); r.Status != http.StatusOK {
		t.Fatalf("creating activity 8: %d %v", r.Status, r.Body)
	}

	// A worker of its own, stopped before the in-flight reservation is made.
	workerCtx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- runComponents(workerCtx, testLog(), p.Cfg, components{"worker"}, nil) }()
	unpaid := func(rid string, user int64, q int) string {
		t.Helper()
		r := p.order(t, orderBody{RequestID: rid, UserID: user, ActivityID: 7, ItemID: 70, Quantity: q})
		if r.Status != http.StatusAccepted {
			t.Fatalf("order %s: %d %v", rid, r.Status, r.Body)
		}
		p.waitStatus(t, r.Str("orderNo"), client.StatusUnpaid)
		return r.Str("orderNo")
	}
	paidNo := unpaid("adm-paid", 1, 1)
	unpaid("adm-unpaid", 2, 2)
	closedNo := unpaid("adm-closed", 3, 1)
	// Pay is idempotent: a 503 (Postgres past its bound on a busy machine)
	// is retried.
	if err := client.RetryIdempotent(ctx, func() error { _, err := p.api().Pay(ctx, paidNo); return err }); err != nil {
		t.Fatalf("pay: %v", err)
	}
	ordertest.AgeOrders(t, p.DB.Pool, time.Hour, closedNo)
	testenv.WaitFor(t, 20*time.Second, "the aged order CLOSED and its stock back in Redis", func() bool {
		n, err := p.Orders.CountPendingCompensations(ctx)
		if err != nil || n != 0 {
			return false
		}
		o, err := p.orderOf(t, closedNo)
		return err == nil && o.Status == client.StatusClosed
	})
	stopWorker()
	if err := <-workerDone; err != nil {
		t.Fatalf("worker: %v", err)
	}
	if r := p.order(t, orderBody{RequestID: "adm-inflight", UserID: 4, ActivityID: 7, ItemID: 70, Quantity: 2}); r.Status != http.StatusAccepted {
		t.Fatalf("in-flight order: %d %v", r.Status, r.Body)
	}

	type item struct {
		initial, stock int64
		redisStock     any // float64, or nil for null
		sold           int64
		inFlight       any
		closed         int64
	}
	assertItems := func(t *testing.T, r apiResponse, redis string, want map[int64]item) {
		t.Helper()
		if r.Status != http.StatusOK || r.Str("redis") != redis {
			t.Fatalf("GET activity: %d %v, want 200 with redis %q", r.Status, r.Body, redis)
		}
		items, _ := r.Body["items"].([]any)
		if len(items) != len(want) {
			t.Fatalf("items %v, want %d", items, len(want))
		}
		for _, raw := range items {
			got := raw.(map[string]any)
			id := int64(got["itemId"].(float64))
			w, ok := want[id]
			if !ok {
				t.Errorf("unexpected item %v", got)
				continue
			}
			num := func(v int64) float64 { return float64(v) }
			if got["initialStock"] != num(w.initial) || got["stock"] != num(w.stock) || got["redisStock"] != w.redisStock ||
				got["sold"] != num(w.sold) || got["inFlight"] != w.inFlight || got["closed"] != num(w.closed) {
				t.Errorf("item %d: %v, want initial %d stock %d redis %v sold %d inFlight %v closed %d",
					id, got, w.initial, w.stock, w.redisStock, w.sold, w.inFlight, w.closed)
			}
		}
	}

	t.Run("EveryState", func(t *testing.T) {
		r := read(t, "/admin/v1/activities/7")
		if r.Str("name") != "sale 7" || r.Body["perUserLimit"] != float64(2) || r.Str("startsAt") == "" || r.Str("endsAt") == "" {
			t.Errorf("activity fields: %v", r.Body)
		}
		// 10 units: 1 PAID + 2 UNPAID sold, 1 CLOSED (given back to both
		// stores), 2 reserved in Redis only.
		assertItems(t, r, "ok", map[int64]item{
			70: {initial: 10, stock: 7, redisStock: float64(5), sold: 3, inFlight: float64(2), closed: 1},
			71: {initial: 5, stock: 5, redisStock: float64(5), sold: 0, inFlight: float64(0), closed: 0},
		})
		if rs := p.redisStock(t, it); rs != 5 {
			t.Errorf("redis stock read directly: %d, want 5", rs)
		}
	})
	t.Run("NotPreheated", func(t *testing.T) {
		assertItems(t, read(t, "/admin/v1/activities/8"), "ok", map[int64]item{
			80: {initial: 3, stock: 3, redisStock: nil, sold: 0, inFlight: float64(0), closed: 0},
		})
	})
	t.Run("Refusals", func(t *testing.T) {
		if r := read(t, "/admin/v1/activities/999"); r.Status != http.StatusNotFound || r.Code() != "ACTIVITY_NOT_FOUND" {
			t.Errorf("unknown activity: %d %v", r.Status, r.Body)
		}
		for _, bad := range []string{"0", "abc", "-1"} {
			if r := read(t, "/admin/v1/activities/"+bad); r.Status != http.StatusBadRequest || r.Code() != "INVALID_REQUEST" {
				t.Errorf("activity id %q: %d %v", bad, r.Status, r.Body)
			}
		}
		if r := p.do(t, http.MethodGet, "/admin/v1/activities/7", "", nil); r.Status != http.StatusUnauthorized || r.Code() != "UNAUTHORIZED" {
			t.Errorf("no token: %d %v", r.Status, r.Body)
		}
	})
	t.Run("RedisDownAnswersFromPostgres", func(t *testing.T) {
		redisProxy.Down()
		defer redisProxy.Up(t)
		assertItems(t, read(t, "/admin/v1/activities/7"), "unavailable", map[int64]item{
			70: {initial: 10, stock: 7, redisStock: nil, sold: 3, inFlight: nil, closed: 1},
			71: {initial: 5, stock: 5, redisStock: nil, sold: 0, inFlight: nil, closed: 0},
		})
	})
	t.Run("PostgresDownIs503", func(t *testing.T) {
		pgProxy.Down()
		defer pgProxy.Up(t)
		if r := p.do(t, http.MethodGet, "/admin/v1/activities/7", "", nil, auth...); r.Status != http.StatusServiceUnavailable || r.Code() != "UNAVAILABLE" || r.Header.Get("Retry-After") == "" {
			t.Errorf("Postgres down: %d %v, want 503 UNAVAILABLE with Retry-After", r.Status, r.Body)
		}
	})
	t.Run("WorkerCatchesUp", func(t *testing.T) {
		// Once a worker runs, the reservation becomes an order: in flight
		// moves to sold, and both stores agree (I1, I5).
		p.startWorker(t)
		testenv.WaitFor(t, 30*time.Second, "the in-flight reservation committed", func() bool {
			r := read(t, "/admin/v1/activities/7")
			return r.Status == http.StatusOK && r.Str("redis") == "ok" && r.Body["items"].([]any)[0].(map[string]any)["inFlight"] == float64(0)
		})
		assertItems(t, read(t, "/admin/v1/activities/7"), "ok", map[int64]item{
			70: {initial: 10, stock: 5, redisStock: float64(5), sold: 5, inFlight: float64(0), closed: 1},
			71: {initial: 5, stock: 5, redisStock: float64(5), sold: 0, inFlight: float64(0), closed: 0},
		})
		p.waitDrained(t, it)
		p.assertInvariants(t, it)
	})
}
