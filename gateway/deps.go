package gateway

import (
	"context"
	"errors"
	"time"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// pgTimeout bounds a Postgres call made while a client waits.
const pgTimeout = 2 * time.Second

// inPostgres runs fn through the Postgres breaker, bounded in time. The
// store's domain errors are answers, not failures: they never trip it.
func (s *Server) inPostgres(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.inPostgresWithin(ctx, pgTimeout, fn)
}

// inPostgresWithin is inPostgres bounded by timeout instead: for a
// transaction that waits on other work while it holds a lock.
func (s *Server) inPostgresWithin(ctx context.Context, timeout time.Duration, fn func(ctx context.Context) error) error {
	return guarded(ctx, s.pgCB.Do, timeout, fn, order.ErrNotFound, order.ErrOrderClosed, order.ErrOrderRejected, order.ErrOrderPaid, order.ErrStockBelowSold,
		order.ErrBucketsFixed, order.ErrItemPreheated, order.ErrSaleEnded)
}

// inRedis runs fn through the Redis breaker, bounded by REDIS_TIMEOUT.
func (s *Server) inRedis(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.inRedisWithin(ctx, s.cfg.ReserveTimeout, fn)
}

// inRedisWithin is inRedis for fn that makes several round trips, bounded
// by timeout in all.
func (s *Server) inRedisWithin(ctx context.Context, timeout time.Duration, fn func(ctx context.Context) error) error {
	return guarded(ctx, s.redisCB.Do, timeout, fn, stock.ErrSaleOver)
}

func guarded(ctx context.Context, do func(func() error) error, timeout time.Duration,
	fn func(ctx context.Context) error, answers ...error) error {
	var answer error
	err := do(func() error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err := fn(ctx)
		for _, a := range answers {
			if errors.Is(err, a) {
				answer = err
				return nil
			}
		}
		return err
	})
	if answer != nil {
		return answer
	}
	return err
}
