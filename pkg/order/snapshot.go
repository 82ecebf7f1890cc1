package order

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ActivitySnapshot is everything Postgres records of one activity, read in
// one snapshot: what the invariant checker (pkg/invariant) holds to I1–I7.
type ActivitySnapshot struct {
	ActivityID int64
	Items      []ItemStock // by itemId
	Orders     []SnapshotOrder
	// Decisions are the activity's processed_requests rows.
	Decisions []Decided
	// Refused are reservations refused because their requestId was first
	// used for another item (IDEMPOTENCY_KEY_REUSED): REJECTED records of
	// their own, beside the first request's decision.
	Refused []Refused
	// PendingCompensations counts the activity's compensations not yet
	// applied in Redis.
	PendingCompensations int64
}

// SnapshotOrder is one order row as the checker needs it.
type SnapshotOrder struct {
	OrderNo   string
	RequestID string
	UserID    int64
	ItemID    int64
	Quantity  int64
	Status    string
	Paid      bool // paid_at is set
	Closed    bool // closed_at is set
}

// Decided is one processed_requests row.
type Decided struct {
	RequestID string
	Outcome   Outcome
	OrderNo   string
	Reason    string // for REJECTED
}

// Refused is one rejected_reservations row.
type Refused struct {
	OrderNo   string
	RequestID string
	Reason    string
}

// Snapshot reads the activity in one read-only REPEATABLE READ
// transaction. A database from before rejected_reservations (an older
// binary's) has no Refused.
func (s *Store) Snapshot(ctx context.Context, activityID int64) (ActivitySnapshot, error) {
	snap := ActivitySnapshot{ActivityID: activityID}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return snap, fmt.Errorf("reading activity %d: %w", activityID, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if snap.Items, err = queryAll[ItemStock](ctx, tx, "reading item stock", `SELECT activity_id, item_id, initial_stock, stock, version, buckets
		FROM item_stock WHERE activity_id = $1 ORDER BY item_id`, activityID); err != nil {
		return snap, err
	}
	if snap.Orders, err = queryAll[SnapshotOrder](ctx, tx, "reading orders", `SELECT order_no, request_id, user_id, item_id, quantity::bigint, status,
		paid_at IS NOT NULL, closed_at IS NOT NULL FROM orders WHERE activity_id = $1 ORDER BY order_no`, activityID); err != nil {
		return snap, err
	}
	if snap.Decisions, err = queryAll[Decided](ctx, tx, "reading processed requests", `SELECT request_id, outcome, order_no, COALESCE(reason, '')
		FROM processed_requests WHERE activity_id = $1 ORDER BY request_id`, activityID); err != nil {
		return snap, err
	}
	var refusedTable bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('rejected_reservations') IS NOT NULL`).Scan(&refusedTable); err != nil {
		return snap, fmt.Errorf("reading activity %d: %w", activityID, err)
	}
	if refusedTable {
		if snap.Refused, err = queryAll[Refused](ctx, tx, "reading refused reservations", `SELECT order_no, request_id, reason
			FROM rejected_reservations WHERE activity_id = $1 ORDER BY order_no`, activityID); err != nil {
			return snap, err
		}
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM redis_compensations WHERE activity_id = $1 AND applied_at IS NULL`,
		activityID).Scan(&snap.PendingCompensations); err != nil {
		return snap, fmt.Errorf("counting pending compensations: %w", err)
	}
	return snap, nil
}

// Drain is what of an activity is still being decided or given back.
type Drain struct {
	Decided              int64 // processed_requests rows
	PendingCompensations int64 // compensations not yet applied in Redis
}

// DrainOf counts the activity's decisions and pending compensations (the
// load tool polls it until every accepted request is decided).
func (s *Store) DrainOf(ctx context.Context, activityID int64) (Drain, error) {
	var d Drain
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM processed_requests WHERE activity_id = $1),
		(SELECT count(*) FROM redis_compensations WHERE activity_id = $1 AND applied_at IS NULL)`, activityID).
		Scan(&d.Decided, &d.PendingCompensations)
	if err != nil {
		return d, fmt.Errorf("reading the drain of activity %d: %w", activityID, err)
	}
	return d, nil
}
