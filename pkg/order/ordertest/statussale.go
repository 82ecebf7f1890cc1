package ordertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"orderpipe/pkg/order"
)

// StatusSale is a sale (activity 1, item 10) whose orders a test makes and
// changes through the store's own path, so that the orders.status outbox
// fills as in production: what the relay and the webhook deliverer carry.
type StatusSale struct {
	orders *order.Store
	made   atomic.Int64
}

// MustStatusSale creates the sale on orders with units of stock.
func MustStatusSale(tb TB, orders *order.Store, units int64) *StatusSale {
	tb.Helper()
	err := orders.UpsertActivity(context.Background(), order.Activity{ID: 1, Name: "sale", StartsAt: time.Now().Add(-time.Hour),
		EndsAt: time.Now().Add(time.Hour), PerUserLimit: 1, Items: []order.ItemStock{{ItemID: 10, InitialStock: units}}})
	if err != nil {
		tb.Fatalf("creating the sale: %v", err)
	}
	return &StatusSale{orders: orders}
}

// Change makes n orders, pays every second one and cancels every third
// one of the rest: each order ends with one or two events. It returns the
// first error, for the caller to report as its goroutine allows; calls may
// run concurrently.
func (s *StatusSale) Change(ctx context.Context, n int) error {
	for range n {
		u := s.made.Add(1)
		no := statusOrderNo(u)
		ds, err := s.orders.DecideBatch(ctx, []order.Request{{RequestID: fmt.Sprintf("r-%d", u), OrderNo: no, UserID: u,
			ActivityID: 1, ItemID: 10, Quantity: 1, ReservedAt: time.Now(), Held: true}})
		if err != nil || ds[0].Outcome != order.Created {
			return fmt.Errorf("order %s: %v %v", no, ds, err)
		}
		switch {
		case u%2 == 0:
			_, err = s.orders.Pay(ctx, no)
		case u%3 == 0:
			_, _, err = s.orders.Cancel(ctx, no, u)
		}
		if err != nil {
			return fmt.Errorf("changing %s: %w", no, err)
		}
	}
	return nil
}

// OrderNos are the orders Change has made so far, 1-10-o1 on.
func (s *StatusSale) OrderNos() []string {
	out := make([]string, s.made.Load())
	for i := range out {
		out[i] = statusOrderNo(int64(i + 1))
	}
	return out
}

func statusOrderNo(user int64) string { return fmt.Sprintf("1-10-o%d", user) }
