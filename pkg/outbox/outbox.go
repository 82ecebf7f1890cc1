// Package outbox applies the Postgres outbox of Redis compensations with the
// release script: each one exactly once (the script's fate guard makes a
// repeated apply a no-op, the row's applied_at stops the retries). It never
// decides whether a compensation is owed: package order does.
package outbox

import (
	"context"
	"log/slog"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// Applier applies compensations.
type Applier struct {
	Orders *order.Store
	Stock  *stock.Store
	Log    *slog.Logger
}

// Result counts one apply run.
type Result struct {
	Applied int
	Failed  int
}

// Apply runs the release script for each compensation and marks it applied.
// A failure is recorded on the row and left for the next sweep.
func (a *Applier) Apply(ctx context.Context, comps []order.Compensation) (Result, error) {
	var res Result
	for _, c := range comps {
		out, err := a.Stock.Compensate(ctx, stock.Release{
			Item:       stock.Item{ActivityID: c.ActivityID, ItemID: c.ItemID},
			Ref:        stock.Ref{RequestID: c.RequestID, OrderNo: c.OrderNo},
			UserID:     c.UserID,
			Quantity:   c.Quantity,
			LimitOwner: c.LimitOwner,
		})
		if err != nil {
			res.Failed++
			if a.Log != nil {
				a.Log.Warn("compensation failed, will retry", "request_id", c.RequestID, "order_no", c.OrderNo, "err", err)
			}
			if mErr := a.Orders.MarkCompensationFailed(ctx, c.ID, err); mErr != nil {
				return res, mErr
			}
			continue
		}
		if err := a.Orders.MarkCompensationApplied(ctx, c.ID); err != nil {
			return res, err
		}
		if out == stock.Released {
			res.Applied++ // an already-released one was counted by whoever released it
		}
	}
	return res, nil
}
