package locate

import (
	"context"
	"errors"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// withBuckets lists every Redis bucket of the items (bucketed stock: a
// request's keys are in its user's bucket, and the user may not be known
// yet). An item Postgres does not know is searched in bucket 0 only.
func (f *Finder) withBuckets(ctx context.Context, items []stock.Item) ([]stock.Item, error) {
	out := make([]stock.Item, 0, len(items))
	for _, it := range items {
		is, err := f.Orders.ItemStockOf(ctx, it.ActivityID, it.ItemID)
		if err != nil && !errors.Is(err, order.ErrNotFound) {
			return nil, err
		}
		for b := range max(is.Buckets, 1) {
			bi := it
			bi.Bucket = b
			out = append(out, bi)
		}
	}
	return out, nil
}
