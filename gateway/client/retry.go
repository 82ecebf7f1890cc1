package client

import (
	"context"
	"errors"
	"time"
)

// Retry shapes PlaceOrderRetrying.
type Retry struct {
	// Budget bounds the whole call, retries and waits included (0: 10 s).
	Budget time.Duration
	// Attempt bounds one attempt (0: the HTTPClient's own timeout only). A
	// storefront shorter than the gateway's PRODUCE_TIMEOUT may give up on
	// an attempt that is still producing; its retry then replays it.
	Attempt time.Duration
	// Backoff is the first wait when the answer names none (0: 50 ms),
	// doubled per attempt up to MaxBackoff (0: 1 s). A Retry-After wins.
	Backoff, MaxBackoff time.Duration
	// OnAttemptFunc, when set, sees every attempt's outcome (for a history
	// or a log); n counts from 1.
	OnAttemptFunc func(n int, p Placed, err error)
}

// PlaceOrderRetrying sends r until it gets an answer that is not
// IsRetriable or the budget is spent, with the same requestId each time:
// after a lost answer, a 503 or a 429 the gateway either never reserved
// (and reserves now) or replays the first answer (Placed.Replayed, status
// 200, the same orderNo). The last attempt's outcome is returned; a spent
// budget returns the last retriable error.
func (c *Client) PlaceOrderRetrying(ctx context.Context, r OrderRequest, rt Retry) (Placed, error) {
	return retrying(ctx, rt, func(ctx context.Context) (Placed, error) { return c.PlaceOrder(ctx, r) }, rt.OnAttemptFunc)
}

// PayRetrying pays orderNo as Pay does, under one Idempotency-Key for every
// attempt (key, or a fresh one when ""), until an answer that is not
// IsRetriable or the budget is spent: a retry while the first attempt runs
// is told 409 IDEMPOTENCY_KEY_IN_PROGRESS and waits its Retry-After; one
// after it gets its answer again. rt.OnAttemptFunc is not called.
func (c *Client) PayRetrying(ctx context.Context, orderNo, key string, rt Retry) (Paid, error) {
	if key == "" {
		key = NewIdempotencyKey()
	}
	return retrying(ctx, rt, func(ctx context.Context) (Paid, error) { return c.Pay(ctx, orderNo, WithIdempotencyKey(key)) }, nil)
}

// CancelRetrying is PayRetrying for Cancel.
func (c *Client) CancelRetrying(ctx context.Context, orderNo string, userID int64, key string, rt Retry) (Cancelled, error) {
	if key == "" {
		key = NewIdempotencyKey()
	}
	return retrying(ctx, rt, func(ctx context.Context) (Cancelled, error) {
		return c.Cancel(ctx, orderNo, userID, WithIdempotencyKey(key))
	}, nil)
}

// retrying sends call until it gets an answer that is not IsRetriable or the
// budget is spent, waiting a Retry-After if answered one, else backing off.
func retrying[T any](ctx context.Context, rt Retry, call func(ctx context.Context) (T, error), onAttempt func(n int, v T, err error)) (T, error) {
	if rt.Budget <= 0 {
		rt.Budget = 10 * time.Second
	}
	if rt.Backoff <= 0 {
		rt.Backoff = 50 * time.Millisecond
	}
	if rt.MaxBackoff <= 0 {
		rt.MaxBackoff = time.Second
	}
	deadline := time.Now().Add(rt.Budget)
	backoff := rt.Backoff
	for n := 1; ; n++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if rt.Attempt > 0 {
			actx, cancel = context.WithTimeout(ctx, rt.Attempt)
		}
		v, err := call(actx)
		cancel()
		if onAttempt != nil {
			onAttempt(n, v, err)
		}
		if !IsRetriable(err) || ctx.Err() != nil {
			return v, err
		}
		wait := backoff
		if e := (*Error)(nil); errors.As(err, &e) && e.RetryAfter > 0 {
			wait = e.RetryAfter
		}
		backoff = min(2*backoff, rt.MaxBackoff)
		if time.Now().Add(wait).After(deadline) {
			return v, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
	}
}

// RetryIdempotent runs call, an idempotent call such as PutActivity or
// Preheat, until it succeeds, fails for good or has failed retriably
// (IsRetriable: a 503 from a busy order store, a lost answer) five times, a
// second apart. It returns the last error.
func RetryIdempotent(ctx context.Context, call func() error) error {
	err := call()
	for i := 1; i < 5 && IsRetriable(err) && ctx.Err() == nil; i++ {
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		err = call()
	}
	return err
}
