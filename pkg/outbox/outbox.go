// Package outbox applies the Postgres outbox of Redis compensations with the
// release script: each one exactly once (the script's fate guard makes a
// repeated apply a no-op, the row's applied_at stops the retries). It never
// decides whether a compensation is owed: package order does.
package outbox

import (
	"context"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// Applier applies compensations.
type Applier struct {
	Orders *order.Store
	Stock  *stock.Store
	Log    *slog.Logger

	buckets sync.Map // stock.Item → its bucket count (buckets.go)
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
		err := a.apply(ctx, c, &res)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// apply applies one compensation in its release span.
func (a *Applier) apply(ctx context.Context, c order.Compensation, res *Result) (err error) {
	ctx, span := a.startRelease(ctx, c)
	defer func() {
		telemetry.RecordError(span, err)
		span.End()
	}()
	it, cerr := a.itemOf(ctx, c)
	var out stock.ReleaseOutcome
	if cerr == nil {
		out, cerr = a.Stock.Release(ctx, stock.Compensation, stock.Release{
			Item:       it,
			Ref:        stock.Ref{RequestID: c.RequestID, OrderNo: c.OrderNo},
			UserID:     c.UserID,
			Quantity:   c.Quantity,
			LimitOwner: c.LimitOwner,
		})

	}
	if cerr != nil {
		res.Failed++
		telemetry.RecordError(span, cerr)
		if a.Log != nil {
			a.Log.WarnContext(ctx, "compensation failed, will retry", "request_id", c.RequestID, "order_no", c.OrderNo, "err", cerr)
		}
		return a.Orders.MarkCompensationFailed(ctx, c.ID, cerr)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("release.outcome", string(out)))
	}
	if err := a.Orders.MarkCompensationApplied(ctx, c.ID); err != nil {
		return err
	}
	if out == stock.Released {
		res.Applied++ // an already-released one was counted by whoever released it
	}
	return nil
}

// startRelease starts the span of giving one reservation back. The span is
// about the order (its ids, and WithOrder for what runs under it) and, unless
// ctx already is that order's trace, links to the trace the gateway kept in
// the request's dedup record.
func (a *Applier) startRelease(ctx context.Context, c order.Compensation) (context.Context, trace.Span) {
	inOrderTrace := false
	if rid, _ := telemetry.OrderFrom(ctx); rid == c.RequestID {
		inOrderTrace = true
	}
	ctx = telemetry.WithOrder(ctx, c.RequestID, c.OrderNo)
	ctx, span := telemetry.Tracer().Start(ctx, "release")
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(telemetry.AttrReason.String(c.Reason), attribute.Int64("order.activity_id", c.ActivityID),
		attribute.Int64("order.item_id", c.ItemID), attribute.Int("order.quantity", c.Quantity))
	if !inOrderTrace {
		it, err := a.itemOf(ctx, c)
		if err != nil {
			return ctx, span
		}
		tp, err := a.Stock.TraceParent(ctx, it, c.RequestID)
		if sc, ok := telemetry.ParseTraceParent(tp); err == nil && ok {
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("link.reason", "order")}})
		}
	}
	return ctx, span
}
