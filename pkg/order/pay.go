package order

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

var (
	// ErrOrderClosed: the order was closed unpaid; it can never be paid.
	ErrOrderClosed = errors.New("order is closed")
	// ErrOrderRejected: the request behind the order number was rejected;
	// there is no order to pay.
	ErrOrderRejected = errors.New("order request was rejected")
)

// Pay moves an order from UNPAID to PAID. It is idempotent: paying a PAID
// order returns it unchanged. The conditional update on the row is what
// makes paying and closing exclusive (I6): whichever commits first wins and
// the other matches no row.
//
// Errors: ErrNotFound (unknown to Postgres: maybe still only reserved in
// Redis, which the caller checks), ErrOrderClosed, ErrOrderRejected.
func (s *Store) Pay(ctx context.Context, orderNo string) (Order, error) {
	// Twice at most: a worker may insert the order between a first update
	// that found no row and the read that follows it; the second update
	// then finds it UNPAID.
	for attempt := 0; ; attempt++ {
		o, err := s.pay(ctx, orderNo)
		if errors.Is(err, errRaced) && attempt == 0 {
			continue
		}
		return o, err
	}
}

// errRaced: the order turned up UNPAID after the update found no such row.
var errRaced = errors.New("order appeared while paying")

func (s *Store) pay(ctx context.Context, orderNo string) (Order, error) {
	o, paid, err := s.payRow(ctx, orderNo)
	if err != nil {
		return Order{}, err
	}
	if paid {
		return o, nil
	}
	// Not UNPAID: already paid (idempotent success), closed, rejected or unknown.
	o, err = s.GetOrder(ctx, orderNo)
	if err != nil {
		return Order{}, err
	}
	switch o.Status {
	case StatusPaid:
		return o, nil
	case StatusClosed:
		return o, fmt.Errorf("order %s: %w", orderNo, ErrOrderClosed)
	case StatusRejected:
		return o, fmt.Errorf("order %s: %w", orderNo, ErrOrderRejected)
	}
	// UNPAID: the worker inserted it after the update looked.
	return Order{}, fmt.Errorf("paying order %s: %w", orderNo, errRaced)
}

// payOrderSQL pays an UNPAID order, found by its key alone (IS TRUE: see
// the package doc).
const payOrderSQL = `
		UPDATE orders SET status = 'PAID', paid_at = now(), event_version = event_version + 1
		WHERE order_no = $1 AND (status = 'UNPAID') IS TRUE
		RETURNING request_id, user_id, activity_id, item_id, quantity, status, created_at, paid_at, closed_at, event_version`

// payRow sets the order PAID where it is UNPAID and writes its PAID event in
// the same transaction; paid is false when no UNPAID row matched.
func (s *Store) payRow(ctx context.Context, orderNo string) (o Order, paid bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Order{}, false, fmt.Errorf("beginning pay tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	o = Order{OrderNo: orderNo}
	var version int
	err = tx.QueryRow(ctx, payOrderSQL, orderNo).
		Scan(&o.RequestID, &o.UserID, &o.ActivityID, &o.ItemID, &o.Quantity, &o.Status, &o.CreatedAt, &o.PaidAt, &o.ClosedAt, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, false, nil
	}
	if err != nil {
		return Order{}, false, fmt.Errorf("paying order %s: %w", orderNo, err)
	}
	if err := writeEvents(ctx, tx, []statusChange{{OrderNo: orderNo, RequestID: o.RequestID, UserID: o.UserID, ActivityID: o.ActivityID,
		ItemID: o.ItemID, Quantity: o.Quantity, Status: StatusPaid, Version: version, TraceParent: traceParentOf(ctx)}}); err != nil {
		return Order{}, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Order{}, false, fmt.Errorf("committing payment of %s: %w", orderNo, err)
	}
	return o, true, nil
}
