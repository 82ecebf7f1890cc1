package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// A reserve that finds no sale in Redis (or finds Redis's clock outside its
// window) is NOT_ON_SALE only if Postgres agrees. If the item was preheated
// and its sale window holds, Redis lost the sale's keys (a restart without
// persistence, a failover to a replica that had none of them), or a preheat
// stopped after Postgres recorded the item preheated and before it wrote
// the sale: the answer is 503 with nothing reserved, so the client retries
// with the same requestId once `orderpipe reconciler --fix` (or a new
// preheat) has put the sale back, instead of being told for good that the
// sale it bought from a moment ago does not exist. One exception: when
// Redis's window is not the activity's (edited since its preheat, as a
// sale whose start a PUT moved is until its new preheat), Redis's window is the one that
// sells, so the answer is NOT_ON_SALE with a warning, not a clock error.

// The check is reached by any unauthenticated POST naming an item Redis
// has no sale of, and rotating userId gets past the per-user limiter: a
// flood of random ids must cost Postgres a bounded rate and never trip the
// breaker that GET and pay share. So Postgres is asked about a whole
// activity at once (every item of an activity of a thousand, before its
// preheat or after its end, in one query) and its answer is remembered for
// saleMemory, concurrent callers sharing one query; each item's answer (with
// the window check below) is remembered as long, and its log lines are
// bounded (saleLogsPerSecond). Queries have
// their own breaker, at most saleChecksInFlight pool connections and
// saleChecksPerSecond (with as much burst); a check over that budget fails
// closed (503, nothing reserved), as when Postgres cannot tell.

// saleMemory is how long Postgres's answer about an activity, and the
// answer given for an item, are reused.
const saleMemory = time.Second

// saleMemoryMax bounds the remembered activities and items: past it, the
// expired ones are dropped (and everything if none is).
const saleMemoryMax = 4096

const (
	saleChecksPerSecond = 50
	saleChecksInFlight  = 2
	saleLogsPerSecond   = 5 // and as many at once
)

// errSaleCheckRefused: the lost-sale check is over its budget.
var errSaleCheckRefused = errors.New("lost-sale check over its budget")

type saleAnswer struct {
	onSale bool
	err    error
	at     time.Time // monotonic
}

// activityAnswer is Postgres's answer about an activity.
type activityAnswer struct {
	sale order.ActivitySale
	err  error
	at   time.Time // monotonic
}

type activityCall struct {
	done chan struct{} // closed once a is set
	a    activityAnswer
}

type saleMemo struct {
	mu         sync.Mutex
	answers    map[stock.Item]saleAnswer
	activities map[int64]activityAnswer
	inflight   map[int64]*activityCall
	budget     *rate.Limiter
	slots      chan struct{} // one per query in flight
	// logs bounds the log lines of checkSale: an item's answer is logged
	// once per saleMemory, but a flood of random item ids of one activity
	// (or an activity of a thousand lost items) would be a line each.
	logs       *rate.Limiter
	suppressed atomic.Int64 // lines logs refused since the last one written
}

func newSaleMemo() saleMemo {
	return saleMemo{answers: map[stock.Item]saleAnswer{}, activities: map[int64]activityAnswer{}, inflight: map[int64]*activityCall{},
		budget: rate.NewLimiter(saleChecksPerSecond, saleChecksPerSecond), slots: make(chan struct{}, saleChecksInFlight),
		logs: rate.NewLimiter(saleLogsPerSecond, saleLogsPerSecond)}
}

// remember stores v under k in m, first dropping the expired entries (and,
// if none is, everything) once m holds saleMemoryMax.
func remember[K comparable, V any](m map[K]V, k K, v V, now time.Time, at func(V) time.Time) {
	if len(m) >= saleMemoryMax {
		for key, old := range m {
			if now.Sub(at(old)) >= saleMemory {
				delete(m, key)
			}
		}
		if len(m) >= saleMemoryMax {
			clear(m)
		}
	}
	m[k] = v
}

// saleLost reports whether Postgres says item is on sale now (so its
// missing Redis keys were lost, or, with outsideWindow, Redis's clock
// disagrees with the database's about the window); an error means
// Postgres could not tell.
func (s *Server) saleLost(ctx context.Context, item stock.Item, outsideWindow bool) (bool, error) {
	if s.deps.Orders == nil {
		return false, nil
	}
	m := &s.sales
	now := s.monoNow()
	m.mu.Lock()
	if a, ok := m.answers[item]; ok && now.Sub(a.at) < saleMemory {
		m.mu.Unlock()
		s.deps.Metrics.SaleChecks.WithLabelValues("remembered").Inc()
		return a.onSale, a.err
	}
	// Callers missing the same item at once each build its answer from the
	// one activity answer they share; the log lines are bounded apart.
	act, err := s.activitySale(ctx, item.ActivityID, now) // releases m.mu
	if err != nil {
		return false, err // over the budget, or ctx ended: not remembered
	}
	a := s.checkSale(ctx, item, outsideWindow, act)
	a.at = act.at // as old as the activity's answer it comes from, not older
	m.mu.Lock()
	remember(m.answers, item, a, now, func(a saleAnswer) time.Time { return a.at })
	m.mu.Unlock()
	return a.onSale, a.err
}

// activitySale is Postgres's answer about activity id, remembered, shared
// with concurrent callers, or asked within the check's budget (refused
// beyond it: errSaleCheckRefused). Called with s.sales.mu held; returns
// with it released.
func (s *Server) activitySale(ctx context.Context, id int64, now time.Time) (activityAnswer, error) {
	m := &s.sales
	if a, ok := m.activities[id]; ok && now.Sub(a.at) < saleMemory {
		m.mu.Unlock()
		s.deps.Metrics.SaleChecks.WithLabelValues("remembered").Inc()
		return a, nil
	}
	if c, ok := m.inflight[id]; ok {
		m.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return activityAnswer{}, ctx.Err()
		}
		s.deps.Metrics.SaleChecks.WithLabelValues("remembered").Inc()
		return c.a, nil
	}
	if !m.budget.AllowN(now, 1) {
		m.mu.Unlock()
		s.deps.Metrics.SaleChecks.WithLabelValues("refused").Inc()
		return activityAnswer{}, errSaleCheckRefused
	}
	c := &activityCall{done: make(chan struct{})}
	m.inflight[id] = c
	m.mu.Unlock()

	c.a = s.querySale(ctx, id)
	c.a.at = now
	s.deps.Metrics.SaleChecks.WithLabelValues("queried").Inc()

	m.mu.Lock()
	delete(m.inflight, id)
	remember(m.activities, id, c.a, now, func(a activityAnswer) time.Time { return a.at })
	m.mu.Unlock()
	close(c.done)
	return c.a, nil
}

// querySale asks Postgres about activity id, within the check's own budget
// and breaker.
func (s *Server) querySale(ctx context.Context, id int64) activityAnswer {
	// Not the caller's context: others may be sharing this answer.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgTimeout)
	defer cancel()
	var a activityAnswer
	select {
	case s.sales.slots <- struct{}{}:
		defer func() { <-s.sales.slots }()
		a.err = guarded(ctx, s.salesCB.Do, pgTimeout, func(ctx context.Context) error {
			var err error
			a.sale, err = s.deps.Orders.SaleNow(ctx, id)
			return err
		})
	case <-ctx.Done():
		a.err = fmt.Errorf("waiting for a lost-sale check slot: %w", ctx.Err())
	}
	return a
}

// checkSale is the answer for item from Postgres's answer about its
// activity: with outsideWindow, Redis's window read to tell an edited
// activity from a clock error; the log line that says why an answer is 503.
func (s *Server) checkSale(ctx context.Context, item stock.Item, outsideWindow bool, act activityAnswer) saleAnswer {
	a := saleAnswer{onSale: act.sale.OnSale(item.ItemID), err: act.err}
	starts, ends := act.sale.StartsAt, act.sale.EndsAt
	if a.err == nil && a.onSale && outsideWindow {
		// Redis's window is not the activity's: the activity was edited (a
		// PUT moved its start or end) and not preheated
		// since. Redis's window is the one that sells until a preheat or a
		// reconciler fix writes the new one, and no clock is to blame.
		var rStarts, rEnds time.Time
		var ok bool
		err := s.inRedis(ctx, func(ctx context.Context) error {
			var err error
			rStarts, rEnds, ok, err = s.deps.Stock.SaleWindow(ctx, item)
			return err
		})
		switch {
		case err != nil:
			a.err = err
		case ok && (rStarts.UnixMilli() != starts.UnixMilli() || rEnds.UnixMilli() != ends.UnixMilli()):
			s.saleLog(ctx, slog.LevelWarn, "sale window in Redis is not the activity's (edited since its preheat): answering 404 NOT_ON_SALE by Redis's window until a preheat or `orderpipe reconciler --once --fix` writes the activity's",
				"activity_id", item.ActivityID, "item_id", item.ItemID, "redis_starts", rStarts, "redis_ends", rEnds,
				"starts", starts.UTC(), "ends", ends.UTC())
			a.onSale = false
			return a
		}
	}
	switch {
	case a.err != nil:
		s.saleLog(ctx, slog.LevelError, "no sale in Redis, and Postgres cannot tell whether there should be: answering 503",
			"activity_id", item.ActivityID, "item_id", item.ItemID, "err", a.err)
	case a.onSale && outsideWindow:
		s.saleLog(ctx, slog.LevelError, "sale outside its window by Redis's clock but inside it by the database's: answering 503; check the clocks (NTP) of Redis and Postgres",
			"activity_id", item.ActivityID, "item_id", item.ItemID)
	case a.onSale:
		s.saleLog(ctx, slog.LevelError, "sale missing in Redis but on sale in Postgres (Redis lost its keys, or a preheat stopped before putting it on sale): answering 503 until `orderpipe reconciler --once --fix` or a new preheat restores it",
			"activity_id", item.ActivityID, "item_id", item.ItemID)
	}
	return a
}

// saleLog writes one of checkSale's lines within saleLogsPerSecond, saying
// how many were left out before it.
func (s *Server) saleLog(ctx context.Context, level slog.Level, msg string, args ...any) {
	m := &s.sales
	if !m.logs.AllowN(s.monoNow(), 1) {
		m.suppressed.Add(1)
		return
	}
	if n := m.suppressed.Swap(0); n > 0 {
		args = append(args, "lines_left_out_before", n)
	}
	s.deps.Log.Log(ctx, level, msg, args...)
}
