package order

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// CloseExpired closes up to limit UNPAID orders reserved before now -
// olderThan (by the database clock) in one transaction. An order's creation
// is its reserved_at, the instant the gateway stamped and its payBy counts
// from (created_at is later: when the worker committed it); the caller adds
// a grace for the clocks' skew to CLOSE_AFTER. Each due order is set CLOSED, its units go
// back to item_stock and a CLOSED_UNPAID compensation is written to the outbox
// for the Redis side. It returns the compensations written; the caller applies
// them after the commit (and a sweep does if it dies first).
//
// Rows are locked with FOR UPDATE SKIP LOCKED, so concurrent closers split the
// work and a row being paid is skipped, and the status is set only where it is
// still UNPAID, so an order is closed (and its stock restored) at most once and
// never after it was paid.
func (s *Store) CloseExpired(ctx context.Context, olderThan time.Duration, limit int) ([]Compensation, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("beginning close tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	closed, err := closeDue(ctx, tx, olderThan, limit)
	if err != nil {
		return nil, err
	}
	if len(closed) == 0 {
		return nil, nil
	}
	if err := restoreStock(ctx, tx, closed); err != nil {
		return nil, err
	}
	comps, err := outboxClosed(ctx, tx, closed, ReasonClosedUnpaid)
	if err != nil {
		return nil, err
	}
	if err := writeEvents(ctx, tx, closed); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("committing close batch: %w", err)
	}
	return comps, nil
}

// closeDue locks the oldest due orders other transactions are not holding,
// closes them and returns their changes to CLOSED. Their TraceParent is "":
// each CLOSED event continues its order's trace (that of its first event kept).
func closeDue(ctx context.Context, tx pgx.Tx, olderThan time.Duration, limit int) ([]statusChange, error) {
	return collect(ctx, tx, pgx.RowToStructByNameLax[statusChange], "closing expired orders", closeDueSQL, olderThan, limit, ReasonPaymentTimeout)
}

// closeDueSQL takes the due orders by the closer's partial index and closes
// each one found by its key (IS TRUE: see the package doc).
const closeDueSQL = `
		WITH due AS (
			SELECT order_no FROM orders
			WHERE status = 'UNPAID' AND reserved_at < now() - $1::interval
			ORDER BY reserved_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED
		)
		UPDATE orders o SET status = 'CLOSED', closed_at = now(), close_reason = $3, event_version = o.event_version + 1
		FROM due
		WHERE o.order_no = due.order_no AND (o.status = 'UNPAID') IS TRUE
		RETURNING o.request_id, o.order_no, o.activity_id, o.item_id, o.user_id, o.quantity, o.status, o.close_reason AS reason,
			o.event_version AS version`

// restoreStock gives the closed units back, one update per item, in item
// order so concurrent closers lock item rows in the same order (no deadlock).
func restoreStock(ctx context.Context, tx pgx.Tx, closed []statusChange) error {
	type key struct{ activityID, itemID int64 }
	qty := map[key]int64{}
	for _, c := range closed {
		qty[key{c.ActivityID, c.ItemID}] += int64(c.Quantity)
	}
	keys := make([]key, 0, len(qty))
	for k := range qty {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.activityID, b.activityID), cmp.Compare(a.itemID, b.itemID))
	})
	for _, k := range keys {
		tag, err := tx.Exec(ctx, `UPDATE item_stock SET stock = stock + $3, version = version + 1, updated_at = now()
			WHERE activity_id = $1 AND item_id = $2`, k.activityID, k.itemID, qty[k])
		if err != nil {
			return fmt.Errorf("restoring stock of %d:%d: %w", k.activityID, k.itemID, err)
		}
		if tag.RowsAffected() == 0 {
			// An order without its stock row: I1 cannot be kept, refuse the batch.
			return fmt.Errorf("restoring stock of %d:%d: %w", k.activityID, k.itemID, ErrNotFound)
		}
	}
	return nil
}

// outboxClosed writes one compensation (of reason why) per closed order. An
// order that already has one (UNIQUE order_no) was already given back in
// Redis, so nothing more is owed for it.
func outboxClosed(ctx context.Context, tx pgx.Tx, closed []statusChange, why string) ([]Compensation, error) {
	var (
		rids, onos    = make([]string, len(closed)), make([]string, len(closed))
		acts, items   = make([]int64, len(closed)), make([]int64, len(closed))
		users, quants = make([]int64, len(closed)), make([]int32, len(closed))
	)
	for i, c := range closed {
		rids[i], onos[i], acts[i], items[i], users[i], quants[i] =
			c.RequestID, c.OrderNo, c.ActivityID, c.ItemID, c.UserID, int32(c.Quantity)
	}
	return queryAll[Compensation](ctx, tx, "writing close compensations", `
		INSERT INTO redis_compensations (request_id, order_no, activity_id, item_id, user_id, quantity, reason)
		SELECT r, o, a, i, u, q, $7
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::int[]) AS t(r, o, a, i, u, q)
		ON CONFLICT (order_no) DO NOTHING
		RETURNING id, request_id, order_no, activity_id, item_id, user_id, quantity, reason, COALESCE(limit_owner, '')`,
		rids, onos, acts, items, users, quants, why)
}

// DueCompensations lists unapplied compensations of one reason whose next
// attempt is due, fewest attempts first. Retries back off per row: a row that
// has been tried n times is due once it is older than min(base·2^n, maxDelay), by
// the database clock. base also keeps a sweep off rows whose writer is still
// applying them right after its commit.
func (s *Store) DueCompensations(ctx context.Context, reason string, base, maxDelay time.Duration, limit int) ([]Compensation, error) {
	return queryAll[Compensation](ctx, s.pool, "listing due compensations", `
		SELECT id, request_id, order_no, activity_id, item_id, user_id, quantity, reason, COALESCE(limit_owner, '')
		FROM redis_compensations
		WHERE applied_at IS NULL AND ($1 = '' OR reason = $1)
		  AND created_at < now() - LEAST($2::interval * power(2, LEAST(attempts, 30)), $3::interval)
		ORDER BY attempts, id
		LIMIT $4`, reason, base, maxDelay, limit)
}
