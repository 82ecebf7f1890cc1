package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Request is one reservation to persist, as the worker decoded it.
type Request struct {
	RequestID  string
	OrderNo    string
	UserID     int64
	ActivityID int64
	ItemID     int64
	Quantity   int
	ReservedAt time.Time
	// Held says the worker claimed the reservation in Redis: its stock is
	// counted there, so a rejection must give it back (a compensation).
	// Without it (Redis lost the entry) a rejection compensates nothing.
	Held bool
}

// Outcome of one request in a batch.
type Outcome string

const (
	Created  Outcome = "CREATED"
	Rejected Outcome = "REJECTED"
	// Duplicate: the request was already processed; Prior tells how.
	Duplicate Outcome = "DUPLICATE"
	// Foreign: the requestId was processed for another reservation (the
	// client reused it for another item); this reservation is given back.
	Foreign Outcome = "FOREIGN"
)

// Decision is what the batch did with one request.
type Decision struct {
	Request
	Outcome Outcome
	Reason  string  // Rejected and Foreign
	Prior   Outcome // Duplicate: the first outcome (Created or Rejected)
	// Compensation written in this transaction, if any.
	Compensation *Compensation
}

// Compensation is an outbox row: a Redis rollback to apply.
type Compensation struct {
	ID         int64
	RequestID  string
	OrderNo    string
	ActivityID int64
	ItemID     int64
	UserID     int64
	Quantity   int
	Reason     string
	LimitOwner string
}

// ProcessBatch persists a batch of reservations in one transaction, in order:
// per request, the idempotency row, the conditional stock update, the order
// insert, and a compensation when Postgres says no. Nothing is visible unless
// the whole batch commits, so the caller commits Kafka offsets only after it
// returns nil.
func (s *Store) ProcessBatch(ctx context.Context, reqs []Request) ([]Decision, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("beginning batch tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	out := make([]Decision, 0, len(reqs))
	for _, r := range reqs {
		d, err := processOne(ctx, tx, r)
		if err != nil {
			return nil, fmt.Errorf("processing %s: %w", r.RequestID, err)
		}
		out = append(out, d)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("committing batch: %w", err)
	}
	return out, nil
}

func processOne(ctx context.Context, tx pgx.Tx, r Request) (Decision, error) {
	d := Decision{Request: r}
	tag, err := tx.Exec(ctx, `
		INSERT INTO processed_requests (request_id, outcome, order_no, user_id, activity_id, item_id, quantity, reserved_at)
		VALUES ($1, 'CREATED', $2, $3, $4, $5, $6, $7) ON CONFLICT (request_id) DO NOTHING`,
		r.RequestID, r.OrderNo, r.UserID, r.ActivityID, r.ItemID, r.Quantity, r.ReservedAt)
	if err != nil {
		return d, fmt.Errorf("recording request: %w", err)
	}
	if tag.RowsAffected() == 0 {
		var prior, priorOrderNo string
		if err := tx.QueryRow(ctx, `SELECT outcome, order_no FROM processed_requests WHERE request_id = $1`, r.RequestID).
			Scan(&prior, &priorOrderNo); err != nil {
			return d, fmt.Errorf("reading processed request: %w", err)
		}
		if priorOrderNo == r.OrderNo {
			d.Outcome, d.Prior = Duplicate, Outcome(prior)
			return d, nil
		}
		d.Outcome, d.Reason = Foreign, ReasonKeyReused
		return d, compensate(ctx, tx, &d, "")
	}

	tag, err = tx.Exec(ctx, `UPDATE item_stock SET stock = stock - $3, version = version + 1, updated_at = now()
		WHERE activity_id = $1 AND item_id = $2 AND stock >= $3`, r.ActivityID, r.ItemID, r.Quantity)
	if err != nil {
		return d, fmt.Errorf("taking stock: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return d, reject(ctx, tx, &d, ReasonDBStockMismatch, "")
	}

	tag, err = tx.Exec(ctx, `
		INSERT INTO orders (order_no, request_id, user_id, activity_id, item_id, quantity, status, reserved_at)
		VALUES ($1, $2, $3, $4, $5, $6, 'UNPAID', $7) ON CONFLICT DO NOTHING`,
		r.OrderNo, r.RequestID, r.UserID, r.ActivityID, r.ItemID, r.Quantity, r.ReservedAt)
	if err != nil {
		return d, fmt.Errorf("inserting order: %w", err)
	}
	if tag.RowsAffected() == 0 {
		// The one-live-order index refused it: give the stock taken above back
		// and hand the user's Redis marker to the order they do hold.
		if _, err := tx.Exec(ctx, `UPDATE item_stock SET stock = stock + $3, version = version + 1, updated_at = now()
			WHERE activity_id = $1 AND item_id = $2`, r.ActivityID, r.ItemID, r.Quantity); err != nil {
			return d, fmt.Errorf("returning stock: %w", err)
		}
		var owner string
		err := tx.QueryRow(ctx, `SELECT request_id FROM orders WHERE user_id = $1 AND activity_id = $2 AND item_id = $3
			AND status IN ('UNPAID', 'PAID')`, r.UserID, r.ActivityID, r.ItemID).Scan(&owner)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return d, fmt.Errorf("reading live order: %w", err)
		}
		return d, reject(ctx, tx, &d, ReasonDuplicateLiveOrder, owner)
	}
	d.Outcome = Created
	return d, nil
}

func reject(ctx context.Context, tx pgx.Tx, d *Decision, reason, limitOwner string) error {
	d.Outcome, d.Reason = Rejected, reason
	if _, err := tx.Exec(ctx, `UPDATE processed_requests SET outcome = 'REJECTED', reason = $2 WHERE request_id = $1`,
		d.RequestID, reason); err != nil {
		return fmt.Errorf("recording rejection: %w", err)
	}
	return compensate(ctx, tx, d, limitOwner)
}

// compensate writes the outbox row that gives a held reservation back.
func compensate(ctx context.Context, tx pgx.Tx, d *Decision, limitOwner string) error {
	if !d.Held {
		return nil
	}
	c := Compensation{RequestID: d.RequestID, OrderNo: d.OrderNo, ActivityID: d.ActivityID, ItemID: d.ItemID,
		UserID: d.UserID, Quantity: d.Quantity, Reason: d.Reason, LimitOwner: limitOwner}
	err := tx.QueryRow(ctx, `
		INSERT INTO redis_compensations (request_id, order_no, activity_id, item_id, user_id, quantity, reason, limit_owner)
		VALUES ($1, $2, $3, $4, $5, $6, $7, NULLIF($8, '')) ON CONFLICT (order_no) DO NOTHING RETURNING id`,
		c.RequestID, c.OrderNo, c.ActivityID, c.ItemID, c.UserID, c.Quantity, c.Reason, c.LimitOwner).Scan(&c.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // already owed
	}
	if err != nil {
		return fmt.Errorf("writing compensation: %w", err)
	}
	d.Compensation = &c
	return nil
}

// PendingCompensations lists unapplied compensations created before
// now - olderThan (by the database clock), oldest first.
func (s *Store) PendingCompensations(ctx context.Context, olderThan time.Duration, limit int) ([]Compensation, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, request_id, order_no, activity_id, item_id, user_id, quantity, reason, COALESCE(limit_owner, '')
		FROM redis_compensations
		WHERE applied_at IS NULL AND created_at < now() - $1::interval
		ORDER BY id LIMIT $2`, olderThan, limit)
	if err != nil {
		return nil, fmt.Errorf("listing pending compensations: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Compensation])
	if err != nil {
		return nil, fmt.Errorf("listing pending compensations: %w", err)
	}
	return out, nil
}

// CountPendingCompensations counts unapplied compensations.
func (s *Store) CountPendingCompensations(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM redis_compensations WHERE applied_at IS NULL`).Scan(&n)
	return n, err
}

// MarkCompensationApplied records that Redis has the rollback.
func (s *Store) MarkCompensationApplied(ctx context.Context, id int64) error {
	_, err := s.pool.Exec(ctx, `UPDATE redis_compensations SET applied_at = now(), attempts = attempts + 1, last_error = NULL
		WHERE id = $1 AND applied_at IS NULL`, id)
	if err != nil {
		return fmt.Errorf("marking compensation %d applied: %w", id, err)
	}
	return nil
}

// MarkCompensationFailed records a failed attempt.
func (s *Store) MarkCompensationFailed(ctx context.Context, id int64, cause error) error {
	_, err := s.pool.Exec(ctx, `UPDATE redis_compensations SET attempts = attempts + 1, last_error = $2 WHERE id = $1`, id, cause.Error())
	if err != nil {
		return fmt.Errorf("marking compensation %d failed: %w", id, err)
	}
	return nil
}
