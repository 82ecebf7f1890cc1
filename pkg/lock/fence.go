package lock

import (
	"context"

	"orderpipe/pkg/order"
)

// ErrStaleFence means Postgres has already seen a newer fencing token for the
// lock (or a bucket a newer holder claimed): the writer lost the lock. It is
// order.ErrStaleFence, as package order keeps the tokens Postgres has seen.
var ErrStaleFence = order.ErrStaleFence

// CheckFence records this lock's fencing token as the newest Postgres has
// seen for its name, or fails with ErrStaleFence (order.CheckFence): call it
// first in the holder's transaction.
func (l *Lock) CheckFence(ctx context.Context, tx order.Execer) error {
	return order.CheckFence(ctx, tx, l.name, l.fence)
}
