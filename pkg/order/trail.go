package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Trail is every row Postgres holds about one requestId, read in one round
// trip: what the on-call's "where is this request?" (package locate) shows.
type Trail struct {
	Decision      *TrailDecision // processed_requests (nil: not decided)
	Order         *TrailOrder    // orders (nil: no order)
	Compensations []TrailCompensation
	Refused       []TrailRefused // rejected_reservations, oldest first
}

// TrailItem is what a row says of the request's user, item and quantity.
type TrailItem struct {
	UserID     int64
	ActivityID int64
	ItemID     int64
	Quantity   int
}

// TrailDecision is the worker's decision.
type TrailDecision struct {
	TrailItem
	Outcome     string
	Reason      string
	OrderNo     string
	ReservedAt  time.Time
	ProcessedAt time.Time
}

// TrailOrder is the order row.
type TrailOrder struct {
	TrailItem
	OrderNo   string
	Status    string
	Reason    string // CLOSED: PAYMENT_TIMEOUT or CANCELLED
	CreatedAt time.Time
	PaidAt    *time.Time
	ClosedAt  *time.Time
}

// TrailCompensation is an outbox row of the request, oldest first.
type TrailCompensation struct {
	ActivityID int64
	ItemID     int64
	OrderNo    string
	Reason     string
	CreatedAt  time.Time
	AppliedAt  *time.Time
	Attempts   int
	LastError  string
}

// TrailRefused is a reservation of the requestId refused because it was
// first used for another reservation.
type TrailRefused struct {
	OrderNo    string
	ActivityID int64
	ItemID     int64
	Reason     string
	RejectedAt time.Time
}

// TrailOf reads the request's decision, order, compensations and refused
// reservations in one round trip.
func (s *Store) TrailOf(ctx context.Context, requestID string) (Trail, error) {
	var t Trail
	b := &pgx.Batch{}
	b.Queue(`SELECT outcome, COALESCE(reason, ''), order_no, user_id, activity_id, item_id, quantity, reserved_at, processed_at
		FROM processed_requests WHERE request_id = $1`, requestID).QueryRow(func(row pgx.Row) error {
		var d TrailDecision
		err := row.Scan(&d.Outcome, &d.Reason, &d.OrderNo, &d.UserID, &d.ActivityID, &d.ItemID, &d.Quantity, &d.ReservedAt, &d.ProcessedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading processed_requests: %w", err)
		}
		t.Decision = &d
		return nil
	})
	b.Queue(`SELECT order_no, status, COALESCE(close_reason, ''), created_at, paid_at, closed_at, user_id, activity_id, item_id, quantity
		FROM orders WHERE request_id = $1`, requestID).QueryRow(func(row pgx.Row) error {
		var o TrailOrder
		err := row.Scan(&o.OrderNo, &o.Status, &o.Reason, &o.CreatedAt, &o.PaidAt, &o.ClosedAt, &o.UserID, &o.ActivityID, &o.ItemID, &o.Quantity)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading orders: %w", err)
		}
		t.Order = &o
		return nil
	})
	b.Queue(`SELECT order_no, reason, created_at, applied_at, attempts, COALESCE(last_error, ''), activity_id, item_id
		FROM redis_compensations WHERE request_id = $1 ORDER BY id`, requestID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c TrailCompensation
			if err := rows.Scan(&c.OrderNo, &c.Reason, &c.CreatedAt, &c.AppliedAt, &c.Attempts, &c.LastError, &c.ActivityID, &c.ItemID); err != nil {
				return fmt.Errorf("reading redis_compensations: %w", err)
			}
			t.Compensations = append(t.Compensations, c)
		}
		return rows.Err()
	})
	b.Queue(`SELECT order_no, activity_id, item_id, reason, rejected_at FROM rejected_reservations
		WHERE request_id = $1 ORDER BY rejected_at`, requestID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var r TrailRefused
			if err := rows.Scan(&r.OrderNo, &r.ActivityID, &r.ItemID, &r.Reason, &r.RejectedAt); err != nil {
				return fmt.Errorf("reading rejected_reservations: %w", err)
			}
			t.Refused = append(t.Refused, r)
		}
		return rows.Err()
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Trail{}, err
	}
	return t, nil
}
