package chaos

import (
	"context"
	"errors"
	"fmt"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
)

// Bucketed stock (CHAOS_BUCKETS): the checker holds I5 to an item's Redis
// stock summed over its buckets, plus the units a mover took from one bucket
// and has not given to another yet; the journal is every bucket's, and a
// user's marker is in the user's bucket.

// redisStockOf is the item's Redis stock over its buckets.
func redisStockOf(ctx context.Context, st *stock.Store, it stock.Item, buckets int) (int64, error) {
	stocks, err := st.BucketStocks(ctx, it, buckets)
	if err != nil {
		return 0, err
	}
	var total int64
	for b, n := range stocks {
		if n == nil {
			return 0, fmt.Errorf("bucket %d: %w", b, errors.New("stock key missing"))
		}
		if *n < 0 {
			return 0, fmt.Errorf("bucket %d holds %d", b, *n)
		}
		total += *n
	}
	ts, err := st.Transfers(ctx, it, buckets)
	if err != nil {
		return 0, err
	}
	for _, t := range ts {
		if !t.Given {
			total += t.Units
		}
	}
	return total, nil
}

// journalLen counts the item's journal entries over its buckets.
func journalLen(ctx context.Context, st *stock.Store, it stock.Item, buckets int) (int64, error) {
	var total int64
	for b := range max(buckets, 1) {
		bi := it
		bi.Bucket = b
		n, err := stocktest.Client(st).HLen(ctx, stocktest.KeysOf(st, bi).Journal).Result()
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// bucketsField is the admin API's items[].buckets, when more than one.
func bucketsField(buckets int) string {
	if buckets <= 1 {
		return ""
	}
	return fmt.Sprintf(`,"buckets":%d`, buckets)
}
