package stocktest

import (
	"context"

	"orderpipe/pkg/stock"
)

// BucketStocks is the stock of each of the item's buckets, -1 for a bucket
// whose key is missing (a list a test compares in one line).
func BucketStocks(tb TB, r Redis, it stock.Item, buckets int) []int64 {
	tb.Helper()
	got, err := r.store().BucketStocks(context.Background(), it, buckets)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]int64, len(got))
	for b, n := range got {
		out[b] = -1
		if n != nil {
			out[b] = *n
		}
	}
	return out
}
