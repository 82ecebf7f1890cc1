package order

import (
	"context"
	"errors"
	"fmt"
)

// ErrStaleFence means Postgres has already seen a newer fencing token for the
// lock: the writer lost the lock, and its transaction must roll back.
// Package lock hands it out as lock.ErrStaleFence.
var ErrStaleFence = errors.New("stale fencing token")

// CheckFence records token as the newest seen for lock name (lock_fences), or
// fails with ErrStaleFence if a newer one was recorded. Call it first in the
// holder's transaction: the row lock it takes makes a newer holder's check
// wait for this transaction, so an older token can never commit after a
// newer one. An equal token passes, so one holder may write in several
// transactions.
//
// The counter lives in Redis (package lock); if Redis ever loses it, new
// tokens restart low and are refused here until the counter is set back above
// lock_fences.token. That refusal is the point: it fails safe. A holder that
// must work after such a loss (the reconciler's fix) raises the counter
// first (RecordedFence, then lock.Locker.RaiseFence).
func CheckFence(ctx context.Context, tx Execer, name string, token int64) error {
	tag, err := tx.Exec(ctx, `
		INSERT INTO lock_fences (name, token) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
		WHERE lock_fences.token <= EXCLUDED.token`, name, token)
	if err != nil {
		return fmt.Errorf("checking fence of lock %q: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("checking fence of lock %q, token %d: %w", name, token, ErrStaleFence)
	}
	return nil
}
