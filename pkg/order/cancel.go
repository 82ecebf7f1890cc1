package order

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrOrderPaid: the order is paid; it can no longer be cancelled.
var ErrOrderPaid = errors.New("order is paid")

// ReasonCancelledCompensation is the reason of the compensation a cancel
// writes (redis_compensations.reason); the closer's is ReasonClosedUnpaid.
const ReasonCancelledCompensation = "CANCELLED"

// Cancel is the buyer giving an UNPAID order up: in one transaction the
// order becomes CLOSED with reason CANCELLED, its units go back to
// item_stock, a compensation is written to the outbox (the release script
// gives the Redis stock and the user's limit marker back) and its CLOSED
// event to order_events. It returns the order and the compensation to apply
// after the commit (nil when this call closed nothing: a sweep applies a
// compensation whose writer died before applying it).
//
// Idempotent: cancelling an order cancelled before returns it, without a
// compensation. The conditional update on the row is what makes pay,
// cancel and close exclusive: whichever commits first wins, the others
// match no UNPAID row.
//
// Errors: ErrNotFound (unknown to Postgres, or not userID's: an order of
// another user is not told apart from none; maybe still only reserved in
// Redis, which the caller checks), ErrOrderPaid, ErrOrderClosed (closed by
// the payment timeout), ErrOrderRejected.
func (s *Store) Cancel(ctx context.Context, orderNo string, userID int64) (Order, *Compensation, error) {
	// Twice at most, as Pay: the worker may insert the order between an
	// update that found no row and the read that follows it.
	for attempt := 0; ; attempt++ {
		o, comp, err := s.cancel(ctx, orderNo, userID)
		if errors.Is(err, errRaced) && attempt == 0 {
			continue
		}
		return o, comp, err
	}
}

func (s *Store) cancel(ctx context.Context, orderNo string, userID int64) (Order, *Compensation, error) {
	o, comp, err := s.cancelRow(ctx, orderNo, userID)
	if err != nil || comp != nil {
		return o, comp, err
	}
	o, err = s.GetOrder(ctx, orderNo)
	if err != nil {
		return Order{}, nil, err
	}
	if o.UserID != userID {
		return Order{}, nil, fmt.Errorf("order %s of another user: %w", orderNo, ErrNotFound)
	}
	switch {
	case o.Status == StatusClosed && o.Reason == ReasonCancelled:
		return o, nil, nil
	case o.Status == StatusClosed:
		return o, nil, fmt.Errorf("order %s: %w", orderNo, ErrOrderClosed)
	case o.Status == StatusPaid:
		return o, nil, fmt.Errorf("order %s: %w", orderNo, ErrOrderPaid)
	case o.Status == StatusRejected:
		return o, nil, fmt.Errorf("order %s: %w", orderNo, ErrOrderRejected)
	}
	return Order{}, nil, fmt.Errorf("cancelling order %s: %w", orderNo, errRaced)
}

// cancelOrderSQL closes userID's UNPAID order, found by its key alone (IS
// TRUE: see the package doc).
const cancelOrderSQL = `
		UPDATE orders SET status = 'CLOSED', closed_at = now(), close_reason = $3, event_version = event_version + 1
		WHERE order_no = $1 AND user_id = $2 AND (status = 'UNPAID') IS TRUE
		RETURNING request_id, user_id, activity_id, item_id, quantity, status, close_reason, created_at, paid_at, closed_at, event_version`

// cancelRow closes the order if it is userID's and UNPAID, with everything
// that goes with it; a nil compensation means no such row matched.
func (s *Store) cancelRow(ctx context.Context, orderNo string, userID int64) (Order, *Compensation, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Order{}, nil, fmt.Errorf("beginning cancel tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	o := Order{OrderNo: orderNo}
	var version int
	err = tx.QueryRow(ctx, cancelOrderSQL, orderNo, userID, ReasonCancelled).
		Scan(&o.RequestID, &o.UserID, &o.ActivityID, &o.ItemID, &o.Quantity, &o.Status, &o.Reason, &o.CreatedAt, &o.PaidAt, &o.ClosedAt, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, nil, nil
	}
	if err != nil {
		return Order{}, nil, fmt.Errorf("cancelling order %s: %w", orderNo, err)
	}
	closed := []statusChange{{OrderNo: orderNo, RequestID: o.RequestID, UserID: o.UserID, ActivityID: o.ActivityID, ItemID: o.ItemID,
		Quantity: o.Quantity, Status: StatusClosed, Reason: ReasonCancelled, Version: version, TraceParent: traceParentOf(ctx)}}
	if err := restoreStock(ctx, tx, closed); err != nil {
		return Order{}, nil, err
	}
	comps, err := outboxClosed(ctx, tx, closed, ReasonCancelledCompensation)
	if err != nil {
		return Order{}, nil, err
	}
	if len(comps) != 1 {
		// A compensation exists already: Redis has had this reservation
		// back, and an UNPAID order with it would break I5. Refuse.
		return Order{}, nil, fmt.Errorf("cancelling order %s: its reservation was already given back", orderNo)
	}
	if err := writeEvents(ctx, tx, closed); err != nil {
		return Order{}, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Order{}, nil, fmt.Errorf("committing cancel of %s: %w", orderNo, err)
	}
	return o, &comps[0], nil
}
