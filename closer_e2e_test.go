package main

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// fastCloser closes orders unpaid for a second, checking often.
func fastCloser(c *config) {
	c.Closer.CloseAfter = time.Second
	c.Closer.Interval = 100 * time.Millisecond
}

// testCloserClosesUnpaidOrder: an order left unpaid past CLOSE_AFTER is
// CLOSED, its units come back in Postgres and Redis, and the same user can
// order the item again.
func testCloserClosesUnpaidOrder(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "closer"}, fastCloser)
	it := stock.Item{ActivityID: 3, ItemID: 30}
	p.mustSale(t, 3, 2, map[int64]int64{30: 5})

	r, err := p.place(t, orderBody{RequestID: "close-1", UserID: 42, ActivityID: 3, ItemID: 30, Quantity: 2})
	if err != nil || r.HTTPStatus != http.StatusAccepted {
		t.Fatalf("order: %d %v", r.HTTPStatus, err)
	}
	var closed client.Order
	testenv.WaitFor(t, 20*time.Second, "the unpaid order CLOSED", func() bool {
		closed, err = p.orderOf(t, r.OrderNo)
		return err == nil && closed.Status == order.StatusClosed
	})
	if closed.ClosedAt == nil || closed.PaidAt != nil {
		t.Errorf("closed order: %+v, want closedAt and no paidAt", closed)
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
	again, err := p.place(t, orderBody{RequestID: "close-2", UserID: 42, ActivityID: 3, ItemID: 30, Quantity: 2})
	if err != nil || again.HTTPStatus != http.StatusAccepted {
		t.Fatalf("ordering again after the close: %d %v, want 202", again.HTTPStatus, err)
	}
	var st string
	testenv.WaitFor(t, 20*time.Second, "the second order persisted", func() bool {
		o, err := p.orderOf(t, again.OrderNo)
		st = o.Status
		return err == nil && st != order.StatusPending && st != ""
	})
	if st == order.StatusRejected {
		t.Fatalf("second order of the same user was rejected")
	}
	// Left unpaid as well, it closes too and everything adds up again.
	testenv.WaitFor(t, 20*time.Second, "the second order CLOSED", func() bool {
		o, err := p.orderOf(t, again.OrderNo)
		return err == nil && o.Status == order.StatusClosed
	})
	p.waitDrained(t, it)
	if rs := p.redisStock(t, it); rs != 5 {
		t.Errorf("redis stock %d after the second close, want 5", rs)
	}
	p.assertInvariants(t, it)
}

// testPayOrder: paying is idempotent; a closed order answers 409
// ORDER_CLOSED, a rejected request's number 409 ORDER_REJECTED, an unknown
// one 404; a paid order is never closed.
func testPayOrder(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "closer"}, func(c *config) {
		c.Closer.CloseAfter = 10 * time.Minute // orders close only when the test ages them
		c.Closer.Interval = 100 * time.Millisecond
	})
	it := stock.Item{ActivityID: 4, ItemID: 40}
	p.mustSale(t, 4, 1, map[int64]int64{40: 10})

	unpaidOrder := func(rid string, user int64) string {
		t.Helper()
		r, err := p.place(t, orderBody{RequestID: rid, UserID: user, ActivityID: 4, ItemID: 40, Quantity: 1})
		if err != nil || r.HTTPStatus != http.StatusAccepted {
			t.Fatalf("order %s: %d %v", rid, r.HTTPStatus, err)
		}
		testenv.WaitFor(t, 20*time.Second, rid+" UNPAID", func() bool {
			o, err := p.orderOf(t, r.OrderNo)
			return err == nil && o.Status == order.StatusUnpaid
		})
		return r.OrderNo
	}
	pay := func(orderNo string) (client.Paid, error) {
		t.Helper()
		return p.api().Pay(contractCtx(t, "pay "+orderNo), orderNo)
	}
	conflict := func(code client.Code) error { return &client.Error{Status: http.StatusConflict, Code: code} }
	paidNo := unpaidOrder("pay-1", 1)
	closedNo := unpaidOrder("pay-2", 2)

	t.Run("Idempotent", func(t *testing.T) {
		for i := range 3 {
			r, err := pay(paidNo)
			if err != nil || r.OrderNo != paidNo || r.Status != order.StatusPaid {
				t.Fatalf("pay #%d: %+v %v, want 200 PAID", i+1, r, err)
			}
		}
		g, err := p.orderOf(t, paidNo)
		if err != nil || g.Status != order.StatusPaid || g.PaidAt == nil || g.ClosedAt != nil {
			t.Fatalf("paid order reads %+v %v", g, err)
		}
	})
	t.Run("ClosedIs409AndPaidStaysPaid", func(t *testing.T) {
		// Both orders look an hour old; the next closer pass sees both.
		ordertest.AgeOrders(t, p.DB.Pool, time.Hour, paidNo, closedNo)
		testenv.WaitFor(t, 20*time.Second, "the aged unpaid order CLOSED", func() bool {
			o, err := p.orderOf(t, closedNo)
			return err == nil && o.Status == order.StatusClosed
		})
		if _, err := pay(closedNo); !errors.Is(err, conflict(client.CodeOrderClosed)) {
			t.Errorf("pay of a closed order: %v, want 409 ORDER_CLOSED", err)
		}
		if g, err := p.orderOf(t, closedNo); err != nil || g.Status != order.StatusClosed || g.PaidAt != nil {
			t.Errorf("closed order after a pay attempt: %+v %v", g, err)
		}
		if g, err := p.orderOf(t, paidNo); err != nil || g.Status != order.StatusPaid || g.ClosedAt != nil {
			t.Errorf("aged paid order: %+v %v, want PAID and never closed", g, err)
		}
		if r, err := pay(paidNo); err != nil || r.Status != order.StatusPaid {
			t.Errorf("paying the paid order again: %+v %v", r, err)
		}
	})
	t.Run("RejectedIs409", func(t *testing.T) {
		ordertest.PutRejected(t, p.DB.Pool, 44, 40, 9, "pay-rejected", "44-40-rejected", "DB_STOCK_MISMATCH")
		if _, err := pay("44-40-rejected"); !errors.Is(err, conflict(client.CodeOrderRejected)) {
			t.Errorf("pay of a rejected request: %v, want 409 ORDER_REJECTED", err)
		}
	})
	t.Run("UnknownIs404", func(t *testing.T) {
		for _, no := range []string{"4-40-nosuchorder", "not-an-order-number", "999-1-x"} {
			if _, err := pay(no); !errors.Is(err, &client.Error{Status: http.StatusNotFound, Code: client.CodeOrderNotFound}) {
				t.Errorf("pay %s: %v, want 404 ORDER_NOT_FOUND", no, err)
			}
		}
	})

	p.waitDrained(t, it)
	if s := p.dbStock(t, it); s.Stock != 9 {
		t.Errorf("db stock %d, want 9 (one paid unit)", s.Stock)
	}
	p.assertInvariants(t, it)
}

// testPayPendingOrder: an order only reserved (no worker has persisted it)
// answers 409 ORDER_PENDING with Retry-After, and is not paid by it.
func testPayPendingOrder(t *testing.T, e engine) {
	t.Parallel()
	p, r := mustPendingOrder(t, e, 5, 50, "pending-1")
	for range 2 {
		if _, err := p.api().Pay(contractCtx(t, "pay"), r.OrderNo); !isOrderPending(err) {
			t.Fatalf("pay of a pending order: %v, want 409 ORDER_PENDING with Retry-After", err)
		}
	}
	if g, err := p.orderOf(t, r.OrderNo); err != nil || g.Status != order.StatusPending {
		t.Errorf("order after the pay attempts: %+v %v, want PENDING", g, err)
	}
	if n := ordertest.CountOrders(t, p.DB.Pool); n != 0 {
		t.Errorf("orders in postgres: %d, want 0", n)
	}
}
