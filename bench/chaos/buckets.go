package chaos

import (
	"context"

	"orderpipe/pkg/stock"
)

// Bucketed stock (CHAOS_BUCKETS): the checker (pkg/invariant) holds I5 to
// an item's Redis stock summed over its buckets, plus the units a mover took
// from one bucket and has not given to another yet; the journal is every
// bucket's, and a user's marker is in the user's bucket.

// journalLen counts the item's journal entries over its buckets.
func journalLen(ctx context.Context, st *stock.Store, it stock.Item, buckets int) (int64, error) {
	all := make([]stock.Item, max(buckets, 1))
	for b := range all {
		all[b] = it
		all[b].Bucket = b
	}
	return st.JournalLen(ctx, all...)
}

// bucketsOver1 is the admin API's items[].buckets: the count when more
// than one, else 0 (absent).
func bucketsOver1(buckets int) int {
	if buckets <= 1 {
		return 0
	}
	return buckets
}
