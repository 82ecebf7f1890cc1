package order

import (
	"context"
	"fmt"
	"time"
)

// BucketedItems lists the preheated items with more than one stock bucket
// whose sale ends after now - grace: the items the mover watches.
func (s *Store) BucketedItems(ctx context.Context, grace time.Duration) ([]SaleItem, error) {
	return s.saleItems(ctx, `s.buckets > 1 AND s.preheated_at IS NOT NULL AND a.ends_at > now() - $1::interval`, grace)
}

// WithItemRow runs fn while holding the item's stock row FOR UPDATE, unless
// another transaction holds it (a worker committing, the reconciler
// checking): then it runs nothing and reports false. The mover moves units
// between buckets under it, so the reconciler, which reads the buckets one
// after the other under the same row lock, never sees a move half done.
func (s *Store) WithItemRow(ctx context.Context, activityID, itemID int64, fn func(ctx context.Context) error) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("beginning tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit, a no-op
	rows, err := tx.Query(ctx, `SELECT 1 FROM item_stock WHERE activity_id = $1 AND item_id = $2 FOR UPDATE SKIP LOCKED`,
		activityID, itemID)
	if err != nil {
		return false, fmt.Errorf("locking item %d:%d: %w", activityID, itemID, err)
	}
	got := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("locking item %d:%d: %w", activityID, itemID, err)
	}
	if !got {
		return false, nil
	}
	if err := fn(ctx); err != nil {
		return true, err
	}
	return true, tx.Commit(ctx)
}
