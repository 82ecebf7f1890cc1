package main

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// TestReplayWhileProducingIsNeverLost: request A reserves orderNo O and
// starts its produce; the broker stalls; the client times out and retries
// as B, which is answered 200 replayed with O. Then A's produce fails. O was
// shown in a 2xx, so it must not be given back: A's abort leaves it to the
// redrive, and GET O ends as an order — never a 404, and a later retry
// still names O.
func TestReplayWhileProducingIsNeverLost(t *testing.T) {
	p := mustPipeline(t, both, func(c *config) {
		c.ProduceTimeout = 2 * time.Second
		c.RedriveAfter = time.Second
		c.RedriveInterval = 200 * time.Millisecond
	})
	if p.Kafka.Cluster == nil {
		t.Skip("needs the in-process broker to stall its produce requests")
	}
	it := stock.Item{ActivityID: 3, ItemID: 1}
	p.mustSale(t, 3, 1, map[int64]int64{1: 5})

	// Every produce request stalls until resume is closed, then fails (the
	// connection is closed): A's produce cannot land.
	stalled, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c := p.Kafka.Cluster
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case <-resume:
			c.DropControl()
			return nil, nil, false
		default:
		}
		c.KeepControl()
		once.Do(func() { close(stalled) })
		c.SleepControl(func() { <-resume })
		return nil, errors.New("broker was paused"), true
	})

	body := orderBody{RequestID: "retried", UserID: 7, ActivityID: 3, ItemID: 1, Quantity: 1}
	first := make(chan apiResponse, 1)
	go func() { first <- p.order(t, body) }()
	<-stalled // A has reserved and its produce is in flight
	b := p.order(t, body)
	if b.Status != http.StatusOK || b.Body["replayed"] != true || b.Str("orderNo") == "" {
		t.Fatalf("retry during the produce: %d %v", b.Status, b.Body)
	}
	a := <-first // A's produce failed (timeout)
	close(resume)
	// A's client may have gone; if it is still there it is told the truth:
	// the reservation stands (202, same orderNo).
	if a.Status != http.StatusAccepted || a.Str("orderNo") != b.Str("orderNo") {
		t.Errorf("first attempt, produce failed after a replay showed its orderNo: %d %v", a.Status, a.Body)
	}
	orderNo := b.Str("orderNo")
	if g := p.do(t, http.MethodGet, "/v1/orders/"+orderNo, "", nil); g.Status != http.StatusOK {
		t.Errorf("GET %s right after the failed produce: %d %v", orderNo, g.Status, g.Body)
	}
	// A later retry still names O.
	if r := p.order(t, body); r.Str("orderNo") != orderNo {
		t.Errorf("a later retry: %d %v, want orderNo %s", r.Status, r.Body, orderNo)
	}
	testenv.WaitFor(t, 30*time.Second, "the redrive to publish "+orderNo, func() bool {
		o, err := p.Orders.GetOrder(t.Context(), orderNo)
		return err == nil && o.Status == order.StatusUnpaid
	})
	p.waitDrained(t, it)
	p.assertInvariants(t, it)
	if s := p.dbStock(t, it); s.Stock != 4 {
		t.Errorf("db stock %d, want 4 (one order)", s.Stock)
	}
}

// TestRequestIDReusedForAnotherItem: the same requestId for another item is
// a reservation the gateway's one atomic step cannot tell from a new one
// (another hash tag): it is answered 202, and the worker refuses it. Its
// orderNo must then read as REJECTED IDEMPOTENCY_KEY_REUSED — never 404 — a
// replay names it again, and its unit goes back on sale.
func TestRequestIDReusedForAnotherItem(t *testing.T) {
	p := mustPipeline(t, both, nil)
	first, second := stock.Item{ActivityID: 4, ItemID: 1}, stock.Item{ActivityID: 4, ItemID: 2}
	p.mustSale(t, 4, 1, map[int64]int64{1: 5, 2: 5})
	a := p.order(t, orderBody{RequestID: "reused", UserID: 9, ActivityID: 4, ItemID: 1, Quantity: 1})
	if a.Status != http.StatusAccepted {
		t.Fatalf("first use: %d %v", a.Status, a.Body)
	}
	testenv.WaitFor(t, 20*time.Second, "the first order", func() bool {
		o, err := p.Orders.GetOrder(t.Context(), a.Str("orderNo"))
		return err == nil && o.Status == order.StatusUnpaid
	})
	b := p.order(t, orderBody{RequestID: "reused", UserID: 9, ActivityID: 4, ItemID: 2, Quantity: 1})
	if b.Status != http.StatusAccepted {
		t.Fatalf("reuse for another item: %d %v", b.Status, b.Body)
	}
	var g apiResponse
	testenv.WaitFor(t, 20*time.Second, "the reused requestId's reservation to be decided", func() bool {
		g = p.do(t, http.MethodGet, "/v1/orders/"+b.Str("orderNo"), "", nil)
		return g.Str("status") != "PENDING"
	})
	if g.Status != http.StatusOK || g.Str("status") != "REJECTED" || g.Str("reason") != "IDEMPOTENCY_KEY_REUSED" || g.Str("requestId") != "reused" {
		t.Fatalf("GET of the refused reservation: %d %v", g.Status, g.Body)
	}
	if r := p.order(t, orderBody{RequestID: "reused", UserID: 9, ActivityID: 4, ItemID: 2, Quantity: 1}); r.Str("orderNo") != b.Str("orderNo") {
		t.Errorf("replay after the refusal: %d %v, want orderNo %s", r.Status, r.Body, b.Str("orderNo"))
	}
	// On call sees both reservations of the requestId.
	if rep := mustLocate(t, p, "reused"); rep.OrderNo != a.Str("orderNo") || len(rep.Refused) != 1 ||
		rep.Refused[0].OrderNo != b.Str("orderNo") || rep.Refused[0].Reason != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("locate reused: orderNo %s, refused %+v", rep.OrderNo, rep.Refused)
	}
	p.waitDrained(t, second)
	p.assertInvariants(t, first)
	p.assertInvariants(t, second)
	if s, rs := p.dbStock(t, second), p.redisStock(t, second); s.Stock != 5 || rs != 5 {
		t.Errorf("item 2 stock db %d redis %d, want 5 (nothing sold)", s.Stock, rs)
	}
}
