package main

import (
	"net/http"
	"testing"
	"time"

	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// fastCloser closes orders unpaid for a second, checking often.
func fastCloser(c *config) {
	c.Closer.CloseAfter = time.Second
	c.Closer.Interval = 100 * time.Millisecond
}

// TestCloserClosesUnpaidOrder: an order left unpaid past CLOSE_AFTER is
// CLOSED, its units come back in Postgres and Redis, and the same user can
// order the item again.
func TestCloserClosesUnpaidOrder(t *testing.T) {
	t.Parallel()
	p := mustPipeline(t, components{"gateway", "worker", "closer"}, fastCloser)
	it := stock.Item{ActivityID: 3, ItemID: 30}
	p.mustSale(t, 3, 2, map[int64]int64{30: 5})

	r := p.order(t, orderBody{RequestID: "close-1", UserID: 42, ActivityID: 3, ItemID: 30, Quantity: 2})
	if r.Status != http.StatusAccepted {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	orderNo := r.Str("orderNo")
	var closed apiResponse
	testenv.WaitFor(t, 20*time.Second, "the unpaid order CLOSED", func() bool {
		closed = p.do(t, http.MethodGet, "/v1/orders/"+orderNo, "", nil)
		return closed.Str("status") == "CLOSED"
	})
	if closed.Body["closedAt"] == nil || closed.Body["paidAt"] != nil {
		t.Errorf("closed order: %v, want closedAt and no paidAt", closed.Body)
	}
	p.waitDrained(t, it)
	if s := p.dbStock(t, it); s.Stock != 5 {
		t.Errorf("db stock %d after close, want 5", s.Stock)
	}
	if rs := p.redisStock(t, it); rs != 5 {
		t.Errorf("redis stock %d after close, want 5", rs)
	}
	p.assertInvariants(t, it)

	// The user's limit marker was freed: they can buy the units again.
	again := p.order(t, orderBody{RequestID: "close-2", UserID: 42, ActivityID: 3, ItemID: 30, Quantity: 2})
	if again.Status != http.StatusAccepted {
		t.Fatalf("ordering again after the close: %d %v, want 202", again.Status, again.Body)
	}
	var st string
	testenv.WaitFor(t, 20*time.Second, "the second order persisted", func() bool {
		st = p.do(t, http.MethodGet, "/v1/orders/"+again.Str("orderNo"), "", nil).Str("status")
		return st != "PENDING" && st != ""
	})
	if st == "REJECTED" {
		t.Fatalf("second order of the same user was rejected")
	}
	// Left unpaid as well, it closes too and everything adds up again.
	testenv.WaitFor(t, 20*time.Second, "the second order CLOSED", func() bool {
		return p.do(t, http.MethodGet, "/v1/orders/"+again.Str("orderNo"), "", nil).Str("status") == "CLOSED"
	})
	p.waitDrained(t, it)
	if rs := p.redisStock(t, it); rs != 5 {
		t.Errorf("redis stock %d after the second close, want 5", rs)
	}
	p.assertInvariants(t, it)
}

// TestPayOrder: paying is idempotent; a closed order answers 409
// ORDER_CLOSED, a rejected request's number 409 ORDER_REJECTED, an unknown
// one 404; a paid order is never closed.
func TestPayOrder(t *testing.T) {
	t.Parallel()
	p := mustPipeline(t, components{"gateway", "worker", "closer"}, func(c *config) {
		c.Closer.CloseAfter = 10 * time.Minute // orders close only when the test ages them
		c.Closer.Interval = 100 * time.Millisecond
	})
	it := stock.Item{ActivityID: 4, ItemID: 40}
	p.mustSale(t, 4, 1, map[int64]int64{40: 10})

	unpaidOrder := func(rid string, user int64) string {
		t.Helper()
		r := p.order(t, orderBody{RequestID: rid, UserID: user, ActivityID: 4, ItemID: 40, Quantity: 1})
		if r.Status != http.StatusAccepted {
			t.Fatalf("order %s: %d %v", rid, r.Status, r.Body)
		}
		testenv.WaitFor(t, 20*time.Second, rid+" UNPAID", func() bool {
			return p.do(t, http.MethodGet, "/v1/orders/"+r.Str("orderNo"), "", nil).Str("status") == "UNPAID"
		})
		return r.Str("orderNo")
	}
	pay := func(orderNo string) apiResponse {
		t.Helper()
		return p.do(t, http.MethodPost, "/v1/orders/"+orderNo+"/pay", "", nil)
	}
	paidNo := unpaidOrder("pay-1", 1)
	closedNo := unpaidOrder("pay-2", 2)

	t.Run("Idempotent", func(t *testing.T) {
		for i := range 3 {
			r := pay(paidNo)
			if r.Status != http.StatusOK || r.Str("orderNo") != paidNo || r.Str("status") != "PAID" {
				t.Fatalf("pay #%d: %d %v, want 200 PAID", i+1, r.Status, r.Body)
			}
		}
		g := p.do(t, http.MethodGet, "/v1/orders/"+paidNo, "", nil)
		if g.Str("status") != "PAID" || g.Body["paidAt"] == nil || g.Body["closedAt"] != nil {
			t.Fatalf("paid order reads %v", g.Body)
		}
	})
	t.Run("ClosedIs409AndPaidStaysPaid", func(t *testing.T) {
		// Both orders look an hour old; the next closer pass sees both.
		ordertest.AgeOrders(t, p.DB.Pool, time.Hour, paidNo, closedNo)
		testenv.WaitFor(t, 20*time.Second, "the aged unpaid order CLOSED", func() bool {
			return p.do(t, http.MethodGet, "/v1/orders/"+closedNo, "", nil).Str("status") == "CLOSED"
		})
		if r := pay(closedNo); r.Status != http.StatusConflict || r.Code() != "ORDER_CLOSED" {
			t.Errorf("pay of a closed order: %d %v, want 409 ORDER_CLOSED", r.Status, r.Body)
		}
		if g := p.do(t, http.MethodGet, "/v1/orders/"+closedNo, "", nil); g.Str("status") != "CLOSED" || g.Body["paidAt"] != nil {
			t.Errorf("closed order after a pay attempt: %v", g.Body)
		}
		if g := p.do(t, http.MethodGet, "/v1/orders/"+paidNo, "", nil); g.Str("status") != "PAID" || g.Body["closedAt"] != nil {
			t.Errorf("aged paid order: %v, want PAID and never closed", g.Body)
		}
		if r := pay(paidNo); r.Status != http.StatusOK || r.Str("status") != "PAID" {
			t.Errorf("paying the paid order again: %d %v", r.Status, r.Body)
		}
	})
	t.Run("RejectedIs409", func(t *testing.T) {
		ordertest.PutRejected(t, p.DB.Pool, 44, 40, 9, "pay-rejected", "44-40-rejected", "DB_STOCK_MISMATCH")
		if r := pay("44-40-rejected"); r.Status != http.StatusConflict || r.Code() != "ORDER_REJECTED" {
			t.Errorf("pay of a rejected request: %d %v, want 409 ORDER_REJECTED", r.Status, r.Body)
		}
	})
	t.Run("UnknownIs404", func(t *testing.T) {
		for _, no := range []string{"4-40-nosuchorder", "not-an-order-number", "999-1-x"} {
			if r := pay(no); r.Status != http.StatusNotFound || r.Code() != "ORDER_NOT_FOUND" {
				t.Errorf("pay %s: %d %v, want 404 ORDER_NOT_FOUND", no, r.Status, r.Body)
			}
		}
	})

	p.waitDrained(t, it)
	if s := p.dbStock(t, it); s.Stock != 9 {
		t.Errorf("db stock %d, want 9 (one paid unit)", s.Stock)
	}
	p.assertInvariants(t, it)
}

// TestPayPendingOrder: an order only reserved (no worker has persisted it)
// answers 409 ORDER_PENDING with Retry-After, and is not paid by it.
func TestPayPendingOrder(t *testing.T) {
	t.Parallel()
	p := mustPipeline(t, components{"gateway"}, nil)
	p.mustSale(t, 5, 1, map[int64]int64{50: 3})
	r := p.order(t, orderBody{RequestID: "pending-1", UserID: 1, ActivityID: 5, ItemID: 50, Quantity: 1})
	if r.Status != http.StatusAccepted {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	for range 2 {
		pr := p.do(t, http.MethodPost, "/v1/orders/"+r.Str("orderNo")+"/pay", "", nil)
		if pr.Status != http.StatusConflict || pr.Code() != "ORDER_PENDING" || pr.Header.Get("Retry-After") == "" {
			t.Fatalf("pay of a pending order: %d %v %v, want 409 ORDER_PENDING with Retry-After", pr.Status, pr.Body, pr.Header)
		}
	}
	if g := p.do(t, http.MethodGet, "/v1/orders/"+r.Str("orderNo"), "", nil); g.Str("status") != "PENDING" {
		t.Errorf("order after the pay attempts: %v, want PENDING", g.Body)
	}
	if n := ordertest.CountOrders(t, p.DB.Pool); n != 0 {
		t.Errorf("orders in postgres: %d, want 0", n)
	}
}
