// Package closer closes orders left unpaid: every Interval it closes UNPAID
// orders older than CloseAfter in Postgres (status, item stock and an outbox
// compensation in one transaction), then gives their reservations back in
// Redis through the outbox, retrying with backoff until Redis has them. Any
// number of replicas may run: rows are split with FOR UPDATE SKIP LOCKED and
// the release script applies each compensation at most once. It never closes
// an order by Redis alone, and never pays one.
package closer

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/order"
	"orderpipe/pkg/outbox"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// Config is the closer's configuration.
type Config struct {
	// CloseAfter is how long an order may stay UNPAID (CLOSE_AFTER).
	CloseAfter time.Duration
	// Grace (CLOSE_GRACE) is how far past an order's payBy the database
	// clock must be before the order is closed: payBy is stamped by a
	// gateway's clock and the closer reads Postgres's, so a Postgres clock
	// running ahead would otherwise close an order its buyer may still pay.
	// Zero is no grace (tests); Read gives the setting's default.
	Grace time.Duration
	// Interval is the pause between passes (CLOSER_INTERVAL).
	Interval time.Duration
	// BatchSize caps the orders closed per transaction.
	BatchSize int
	// RetryBase and RetryMax space the retries of a compensation that could
	// not be applied: a row tried n times waits until it is
	// min(RetryBase·2^n, RetryMax) old. RetryBase is also how long a fresh
	// row is left to the pass that wrote it.
	RetryBase time.Duration
	RetryMax  time.Duration
}

func (c *Config) defaults() {
	setting.DefaultTo(&c.CloseAfter, order.CloseAfterVar.Duration())
	setting.DefaultTo(&c.Interval, intervalVar.Duration())
	setting.DefaultTo(&c.BatchSize, 500)
	setting.DefaultTo(&c.RetryBase, time.Second)
	setting.DefaultTo(&c.RetryMax, time.Minute)
}

// Deps are the closer's collaborators.
type Deps struct {
	Orders  *order.Store
	Stock   *stock.Store
	Metrics *telemetry.Metrics // nil ⇒ a private registry
	Log     *slog.Logger
	// AfterCommitFunc, when set, runs between a close batch's commit and its
	// Redis compensations; an error ends the pass there, as if the process
	// died (tests inject crashes with it).
	AfterCommitFunc func(ctx context.Context, comps []order.Compensation) error
}

// Closer is one closer replica.
type Closer struct {
	cfg     Config
	deps    Deps
	applier *outbox.Applier
}

// New builds a closer.
func New(cfg Config, deps Deps) *Closer {
	cfg.defaults()
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Metrics == nil {
		deps.Metrics = telemetry.NewMetrics()
	}
	return &Closer{cfg: cfg, deps: deps, applier: &outbox.Applier{Orders: deps.Orders, Stock: deps.Stock, Log: deps.Log}}
}

// Result counts one pass.
type Result struct {
	Closed  int   // orders closed
	Applied int   // compensations applied in Redis (this pass's and older ones)
	Failed  int   // failed attempts, left for a later pass
	Pending int64 // compensations (of any reason) still unapplied after the pass; -1 if unknown
}

func (r Result) zero() bool { return r.Closed == 0 && r.Applied == 0 && r.Failed == 0 }

// passTimeout bounds one pass (its batches and their compensations); below
// the 30 s a stopping process waits for its components.
const passTimeout = 20 * time.Second

// Run passes every Interval until ctx ends; a pass in hand finishes its batch
// first. A failed pass is logged and the next one retries.
func (c *Closer) Run(ctx context.Context) error {
	c.deps.Log.Info("closer started", "close_after", c.cfg.CloseAfter.String(), "close_grace", c.cfg.Grace.String(), "interval", c.cfg.Interval.String())
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		// A batch in hand finishes after ctx ends, but no pass waits forever
		// on a Postgres or Redis that hangs instead of refusing.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), passTimeout)
		res, err := c.pass(pctx, ctx)
		cancel()
		if err == nil {
			c.deps.Metrics.CloserPasses.WithLabelValues("ok").Inc()
		} else if ctx.Err() == nil {
			c.deps.Metrics.CloserPasses.WithLabelValues("error").Inc()
		}
		switch {
		case err != nil && ctx.Err() == nil:
			c.deps.Log.Error("closer pass failed", "err", err, "closed", res.Closed, "applied", res.Applied, "failed", res.Failed)
		case !res.zero():
			c.deps.Log.Info("closer pass", "closed", res.Closed, "applied", res.Applied, "failed", res.Failed, "pending", res.Pending)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce runs one pass: retry the compensations that are due, then close
// expired orders batch by batch, applying each batch's compensations after
// its commit.
func (c *Closer) RunOnce(ctx context.Context) (Result, error) {
	return c.pass(ctx, ctx)
}

// pass does the work with ctx and checks stop between batches, so stopping
// never abandons a committed batch before its Redis step.
func (c *Closer) pass(ctx, stop context.Context) (res Result, err error) {
	res.Pending = -1
	m := c.deps.Metrics
	defer func() {
		if n, oldest, err := c.deps.Orders.CompensationBacklog(ctx); err == nil {
			res.Pending = n
			m.CompensationsPending.Set(float64(n))
			m.CompensationsOldest.Set(oldest.Seconds())
		}
	}()

	swept, err := c.applier.SweepDue(ctx, stop, order.ReasonClosedUnpaid,
		outbox.Backoff{Base: c.cfg.RetryBase, Max: c.cfg.RetryMax}, 200)
	c.count(&res, swept)
	if err != nil {
		return res, fmt.Errorf("retrying compensations: %w", err)
	}

	for stop.Err() == nil {
		n, err := c.closeBatch(ctx, &res)
		if err != nil {
			return res, err
		}
		// n counts only compensations written; a short batch means the
		// backlog is done (a conflict-skipped row only makes it shorter).
		if n < c.cfg.BatchSize {
			break
		}
	}
	return res, nil
}

// closeBatch closes one batch and applies its compensations. A batch that
// closed orders gets a span (started when the batch did, so a pass that finds
// nothing to do every few seconds leaves no trace); each release under it
// links to its order's trace.
func (c *Closer) closeBatch(ctx context.Context, res *Result) (n int, err error) {
	started := time.Now()
	comps, err := c.deps.Orders.CloseExpired(ctx, c.cfg.CloseAfter+max(c.cfg.Grace, 0), c.cfg.BatchSize)
	if err != nil {
		return 0, err
	}
	if len(comps) == 0 {
		return 0, nil
	}
	ctx, span := telemetry.Tracer().Start(ctx, "closer pass", trace.WithTimestamp(started))
	defer func() {
		telemetry.RecordError(span, err)
		span.End()
	}()
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("orders.closed", len(comps)), attribute.String("close.after", c.cfg.CloseAfter.String()))
	}
	res.Closed += len(comps)
	c.deps.Metrics.OrdersClosed.Add(float64(len(comps)))
	if f := c.deps.AfterCommitFunc; f != nil {
		if err := f(ctx, comps); err != nil {
			return len(comps), fmt.Errorf("after close commit: %w", err)
		}
	}
	applied, err := c.applier.ApplyUntilFailure(ctx, comps)
	c.count(res, applied)
	if err != nil {
		return len(comps), fmt.Errorf("applying close compensations: %w", err)
	}
	return len(comps), nil
}

func (c *Closer) count(res *Result, r outbox.Result) {
	res.Applied += r.Applied
	res.Failed += r.Failed
	c.deps.Metrics.CompensationsApplied.Add(float64(r.Applied))
	c.deps.Metrics.CompensationsFailed.Add(float64(r.Failed))
}
