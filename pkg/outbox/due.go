package outbox

import (
	"context"
	"fmt"
	"time"

	"orderpipe/pkg/order"
)

// Backoff spaces the retries of one compensation: a row tried n times is
// retried once it is older than min(Base·2^n, Max).
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// ApplyUntilFailure applies compensations in order and stops at the first
// failure: when Redis is down every call would fail (and could each wait a
// timeout), so the rest are left for a later sweep untouched.
func (a *Applier) ApplyUntilFailure(ctx context.Context, comps []order.Compensation) (Result, error) {
	var total Result
	for i := range comps {
		res, err := a.Apply(ctx, comps[i:i+1])
		total.Applied += res.Applied
		total.Failed += res.Failed
		if err != nil || res.Failed > 0 {
			return total, err
		}
	}
	return total, nil
}

// SweepDue applies the pending compensations of one reason ("" for all) whose retry is
// due under b, in pages of pageSize, fewest attempts first (a row that keeps
// failing goes to the back). It stops at the first failure, so an outage costs
// one failed attempt per sweep, and when stop ends.
func (a *Applier) SweepDue(ctx, stop context.Context, reason string, b Backoff, pageSize int) (Result, error) {
	var total Result
	for stop.Err() == nil {
		comps, err := a.Orders.DueCompensations(ctx, reason, b.Base, b.Max, pageSize)
		if err != nil {
			return total, err
		}
		res, err := a.ApplyUntilFailure(ctx, comps)
		total.Applied += res.Applied
		total.Failed += res.Failed
		if err != nil {
			return total, fmt.Errorf("applying compensations: %w", err)
		}
		if len(comps) < pageSize || res.Failed > 0 {
			break
		}
	}
	return total, nil
}
