package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// waitStatus waits until GET (the typed client) answers the order in that
// status, and returns that answer.
func (p *pipeline) waitStatus(tb testing.TB, orderNo, status string) client.Order {
	tb.Helper()
	var o client.Order
	testenv.WaitFor(tb, 30*time.Second, orderNo+" "+status, func() bool {
		var err error
		o, err = p.orderOf(tb, orderNo)
		return err == nil && o.Status == status
	})
	return o
}

func (p *pipeline) cancelOrder(tb testing.TB, orderNo string, body any) apiResponse {
	tb.Helper()
	return p.do(tb, http.MethodPost, "/v1/orders/"+orderNo+"/cancel", "application/json", body)
}

// testCancelOrder: the buyer's cancel closes an UNPAID order with reason
// CANCELLED, gives its unit and the user's limit marker back in Redis at
// once (the user can order again), is idempotent, and is refused for a
// paid order, another user's and a bad body; every change is on
// orders.status (I7, in assertInvariants).
func testCancelOrder(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "relay"}, nil)
	it := stock.Item{ActivityID: 7, ItemID: 70}
	p.mustSale(t, 7, 1, map[int64]int64{70: 5})
	api, ctx := p.api(), contractCtx(t, "cancel")
	place := func(rid string, user int64) string {
		placed, err := p.place(t, orderBody{RequestID: rid, UserID: user, ActivityID: 7, ItemID: 70, Quantity: 1})
		if err != nil || placed.HTTPStatus != http.StatusAccepted {
			t.Fatalf("order %s: %d %v", rid, placed.HTTPStatus, err)
		}
		p.waitStatus(t, placed.OrderNo, order.StatusUnpaid)
		return placed.OrderNo
	}
	no := place("c-1", 1)

	t.Run("BadBodyChangesNothing", func(t *testing.T) {
		for _, body := range []any{`{"userId":"1"}`, `{}`, `{"userId":0}`, `{"userId":1,"extra":true}`, `[1]`} {
			if r := p.cancelOrder(t, no, body); r.Status != http.StatusBadRequest || r.Code() != "INVALID_REQUEST" {
				t.Errorf("cancel with %s: %d %v, want 400 INVALID_REQUEST", body, r.Status, r.Body)
			}
		}
		if r := p.do(t, http.MethodPost, "/v1/orders/"+no+"/cancel", "text/plain", `{"userId":1}`); r.Status != http.StatusUnsupportedMediaType {
			t.Errorf("cancel as text/plain: %d %v", r.Status, r.Body)
		}
		if g, err := p.orderOf(t, no); err != nil || g.Status != order.StatusUnpaid {
			t.Errorf("after refused cancels: %+v %v", g, err)
		}
	})
	t.Run("AnotherUsersIs404", func(t *testing.T) {
		for _, c := range []struct {
			no   string
			user int64
		}{{no, 2}, {"7-70-nosuchorder", 1}, {"not-an-order", 1}} {
			if r := p.cancelOrder(t, c.no, map[string]int64{"userId": c.user}); r.Status != http.StatusNotFound || r.Code() != "ORDER_NOT_FOUND" {
				t.Errorf("cancel %s as user %d: %d %v, want 404 ORDER_NOT_FOUND", c.no, c.user, r.Status, r.Body)
			}
		}
	})
	t.Run("UnpaidIsCancelled", func(t *testing.T) {
		before := p.redisStock(t, it)
		for range 2 { // the second is the idempotent repeat
			c, err := api.Cancel(ctx, no, 1)
			if err != nil || c.Status != order.StatusClosed || c.Reason != order.ReasonCancelled || c.OrderNo != no {
				t.Fatalf("cancel: %+v %v, want 200 CLOSED CANCELLED", c, err)
			}
		}
		g, err := api.GetOrder(ctx, no)
		if err != nil || g.Status != order.StatusClosed || g.Reason != order.ReasonCancelled || g.ClosedAt == nil {
			t.Errorf("GET after cancel: %+v %v", g, err)
		}
		// Given back in Redis exactly once, before the answer.
		if got := p.redisStock(t, it); got != before+1 {
			t.Errorf("redis stock %d after cancel, want %d", got, before+1)
		}
		if _, err := api.Pay(ctx, no); !errors.Is(err, &client.Error{Status: http.StatusConflict, Code: client.CodeOrderClosed}) {
			t.Errorf("pay of a cancelled order: %v, want 409 ORDER_CLOSED", err)
		}
		// The limit marker came back: the same user may order again.
		place("c-1-again", 1)
	})
	t.Run("PaidIs409", func(t *testing.T) {
		paid := place("c-2", 2)
		if _, err := api.Pay(ctx, paid); err != nil {
			t.Fatalf("pay: %v", err)
		}
		if _, err := api.Cancel(ctx, paid, 2); !errors.Is(err, &client.Error{Status: http.StatusConflict, Code: client.CodeOrderPaid}) {
			t.Errorf("cancel of a paid order: %v, want 409 ORDER_PAID", err)
		}
	})

	p.waitDrained(t, it)
	p.assertInvariants(t, it)
}

// testCancelPendingOrder: an order only reserved (no worker has persisted
// it) answers 409 ORDER_PENDING to its buyer and 404 to anyone else.
func testCancelPendingOrder(t *testing.T, e engine) {
	t.Parallel()
	p, placed := mustPendingOrder(t, e, 8, 80, "pending-c")
	api, ctx := p.api(), contractCtx(t, "cancel")
	if _, err := api.Cancel(ctx, placed.OrderNo, 1); !isOrderPending(err) {
		t.Errorf("cancel of a pending order: %v, want 409 ORDER_PENDING with Retry-After", err)
	}
	var ce *client.Error
	if _, err := api.Cancel(ctx, placed.OrderNo, 2); !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
		t.Errorf("another user's cancel of a pending order: %v, want 404", err)
	}
}

// mustPendingOrder starts a pipeline with a gateway alone, so that no
// worker persists what it takes, and places one order of user 1 for a unit
// of a sale of 3: the order stays PENDING.
func mustPendingOrder(t *testing.T, e engine, activityID, itemID int64, requestID string) (*pipeline, client.Placed) {
	t.Helper()
	p := mustPipeline(t, e, components{"gateway"}, nil)
	p.mustSale(t, activityID, 1, map[int64]int64{itemID: 3})
	placed, err := p.place(t, orderBody{RequestID: requestID, UserID: 1, ActivityID: activityID, ItemID: itemID, Quantity: 1})
	if err != nil || placed.HTTPStatus != http.StatusAccepted {
		t.Fatalf("order: %d %v", placed.HTTPStatus, err)
	}
	return p, placed
}

// isOrderPending says whether err is the answer to a request about an
// order not yet persisted: 409 ORDER_PENDING with Retry-After.
func isOrderPending(err error) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Status == http.StatusConflict && ce.Code == client.CodeOrderPending && ce.RetryAfter != 0
}

// testStatusEventsOfARace: many buyers race for a few units; of the orders,
// some are paid, some cancelled, and the rest closed by the closer, while
// pay, cancel and the closer race on some of them. Afterwards every order
// and rejection has exactly the events of its history on orders.status, in
// version order (I7), and I1–I6 hold.
func testStatusEventsOfARace(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "closer", "relay"}, func(c *config) {
		c.Closer.CloseAfter = 3 * time.Second
		c.Closer.Interval = 200 * time.Millisecond
		c.Gateway.UserRPS = 0
	})
	it := stock.Item{ActivityID: 9, ItemID: 90}
	p.mustSale(t, 9, 1, map[int64]int64{90: 20})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var accepted []string
	users := map[string]int64{}
	for u := range int64(40) {
		wg.Go(func() {
			r := p.order(t, orderBody{RequestID: fmt.Sprintf("race-%d", u), UserID: u + 1, ActivityID: 9, ItemID: 90, Quantity: 1})
			if r.Status == http.StatusAccepted {
				mu.Lock()
				accepted = append(accepted, r.Str("orderNo"))
				users[r.Str("orderNo")] = u + 1
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i, no := range accepted {
		wg.Go(func() {
			p.waitStatus(t, no, order.StatusUnpaid)
			switch i % 4 {
			case 0:
				_, _ = p.api().Pay(contractCtx(t, "pay"), no) // the closer may win: I6 is checked below
			case 1:
				p.cancelOrder(t, no, map[string]int64{"userId": users[no]})
			case 2: // left to the closer
			case 3: // pay and cancel at once, racing the closer too
				time.Sleep(time.Duration(i%3) * time.Second)
				var race sync.WaitGroup
				race.Go(func() { _, _ = p.api().Pay(contractCtx(t, "pay"), no) })
				race.Go(func() { p.cancelOrder(t, no, map[string]int64{"userId": users[no]}) })
				race.Wait()
			}
		})
	}
	wg.Wait()
	testenv.WaitFor(t, 60*time.Second, "every order paid or closed", func() bool {
		snap, err := p.Orders.Snapshot(context.Background(), 9)
		if err != nil {
			return false
		}
		for _, o := range snap.Orders {
			if o.Status == order.StatusUnpaid {
				return false
			}
		}
		return true
	})
	p.waitDrained(t, it)
	p.assertInvariants(t, it)
}
