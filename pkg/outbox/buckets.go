package outbox

import (
	"context"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// itemOf is the Redis bucket a compensation gives back to: the one its
// user's reservations are routed to, FNV-1a(userId) mod the item's buckets.
// The count is read from Postgres once per item and kept: it never changes
// once the item is preheated, and a compensation exists only for a
// reservation, which needs the preheat.
func (a *Applier) itemOf(ctx context.Context, c order.Compensation) (stock.Item, error) {
	it := stock.Item{ActivityID: c.ActivityID, ItemID: c.ItemID}
	n, ok := a.buckets.Load(it)
	if !ok {
		is, err := a.Orders.ItemStockOf(ctx, c.ActivityID, c.ItemID)
		if err != nil {
			return it, err
		}
		n, _ = a.buckets.LoadOrStore(it, is.Buckets)
	}
	return it.ForUser(c.UserID, n.(int)), nil
}
