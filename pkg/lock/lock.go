// Package lock owns the Redis lock that keeps singleton jobs (reconciler fix,
// journal redrive) to one runner at a time: keys <prefix>lock:<name> holding a
// random per-holder token with its fencing token ("<token>:<fence>"), and
// <prefix>fence:<name> counting acquisitions.
//
// It must never delete or extend a lock without comparing the token inside
// Redis, never take the lock and set its expiry in separate commands, and
// never let a holder keep writing once it may have lost the lock: the
// watchdog reports loss, and CheckFence makes Postgres refuse writes carrying
// an older fencing token than one it has already seen. Every script must be
// safe to run twice: a Cluster client resends one whose reply was lost.
//
// On Redis Cluster both keys of a lock must share a slot, so give the name a
// hash tag, e.g. "{reconciler}:fix".
package lock

import (
	"context"
	crand "crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrNotAcquired means another holder kept the lock for the whole retry budget.
	ErrNotAcquired = errors.New("lock not acquired")
	// ErrNotHeld means the lock expired or now belongs to another holder.
	ErrNotHeld = errors.New("lock not held")
)

var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)
	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)
	//go:embed raise.lua
	raiseLua    string
	raiseScript = redis.NewScript(raiseLua)
	//go:embed renew.lua
	renewLua    string
	renewScript = redis.NewScript(renewLua)
)

// releaseTimeout bounds the release Do makes after fn, which must happen even
// when the caller's context has already ended.
const releaseTimeout = 5 * time.Second

// Locker hands out locks stored in one Redis.
type Locker struct {
	client redis.UniversalClient
	prefix string
}

// New returns a Locker whose keys all start with prefix ("" in production).
func New(client redis.UniversalClient, prefix string) *Locker {
	return &Locker{client: client, prefix: prefix}
}

type retryPolicy struct {
	base, maxDelay time.Duration
	maxAttempts    int
	maxWait        time.Duration
}

// Option tunes how Acquire and Do retry a held lock.
type Option func(*retryPolicy)

// WithBackoff sets the first retry delay and its cap; delays double per
// attempt and are drawn uniformly from [0, delay) so contenders spread out
// instead of retrying in lockstep. Defaults: 50ms, 1s.
func WithBackoff(base, maxDelay time.Duration) Option {
	return func(p *retryPolicy) { p.base, p.maxDelay = base, maxDelay }
}

// WithMaxAttempts caps the number of tries; 0 means no cap (the default).
func WithMaxAttempts(n int) Option {
	return func(p *retryPolicy) { p.maxAttempts = n }
}

// WithMaxWait caps the time spent retrying (default 10s); 0 means no cap, so
// only the context or WithMaxAttempts ends the wait.
func WithMaxWait(d time.Duration) Option {
	return func(p *retryPolicy) { p.maxWait = d }
}

func (p retryPolicy) delay(attempt int) time.Duration {
	d := p.maxDelay
	if attempt < 32 {
		d = min(p.base<<(attempt-1), p.maxDelay)
	}
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// Acquire takes the lock, retrying with backoff until the retry budget is
// spent; then it fails with ErrNotAcquired rather than queueing forever.
func (lk *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...Option) (*Lock, error) {
	p := retryPolicy{base: 50 * time.Millisecond, maxDelay: time.Second, maxWait: 10 * time.Second}
	for _, o := range opts {
		o(&p)
	}
	start := time.Now()
	for attempt := 1; ; attempt++ {
		l, err := lk.TryAcquire(ctx, name, ttl)
		if !errors.Is(err, ErrNotAcquired) {
			return l, err
		}
		wait := p.delay(attempt)
		if p.maxWait > 0 {
			left := p.maxWait - time.Since(start)
			if left <= 0 {
				return nil, giveUp(name, attempt, start)
			}
			wait = min(wait, left)
		}
		if p.maxAttempts > 0 && attempt >= p.maxAttempts {
			return nil, giveUp(name, attempt, start)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("acquiring lock %q: %w", name, ctx.Err())
		case <-time.After(wait):
		}
	}
}

func giveUp(name string, attempts int, start time.Time) error {
	return fmt.Errorf("acquiring lock %q: %d attempts in %s: %w",
		name, attempts, time.Since(start).Round(time.Millisecond), ErrNotAcquired)
}

// TryAcquire makes a single attempt.
func (lk *Locker) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*Lock, error) {
	if name == "" {
		return nil, errors.New("acquiring lock: empty name")
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("acquiring lock %q: ttl %s under 1ms", name, ttl)
	}
	var b [16]byte
	crand.Read(b[:]) // never fails since Go 1.24
	l := &Lock{
		client:    lk.client,
		name:      name,
		key:       lk.prefix + "lock:" + name,
		token:     hex.EncodeToString(b[:]),
		ttl:       ttl,
		renewedAt: time.Now(),
		lost:      make(chan struct{}),
	}
	fence, err := acquireScript.Run(ctx, lk.client, []string{l.key, lk.prefix + "fence:" + name}, l.token, ttl.Milliseconds()).Int64()
	if err != nil {
		return nil, fmt.Errorf("acquiring lock %q: %w", name, err)
	}
	if fence == 0 {
		return nil, fmt.Errorf("acquiring lock %q: %w", name, ErrNotAcquired)
	}
	l.fence = fence
	return l, nil
}

// FenceMargin is how far RaiseFence puts the counter above the newest token
// Postgres recorded: a holder from before a Redis data loss that acquired
// its token but had not written yet holds a token Postgres never saw, above
// the recorded one; the margin keeps the next tokens above it too (it would
// take that many acquisitions without a single write to reach it).
const FenceMargin = 1000

// RaiseFence moves the fencing counter of lock name up to recorded +
// FenceMargin if it is below recorded: a Redis that lost its data (a restart
// without persistence, a failover to a replica that lagged) restarts the
// counter low, and every holder's token would then be refused by Postgres
// (ErrStaleFence) for ever. Call it with the newest token Postgres recorded
// (lock_fences) before acquiring. It reports whether it moved the counter.
func (lk *Locker) RaiseFence(ctx context.Context, name string, recorded int64) (bool, error) {
	n, err := raiseScript.Run(ctx, lk.client, []string{lk.prefix + "fence:" + name}, recorded, recorded+FenceMargin).Int64()
	if err != nil {
		return false, fmt.Errorf("raising the fence of lock %q above %d: %w", name, recorded, err)
	}
	return n == 1, nil
}

// Do runs fn while holding the lock: it acquires (with opts), keeps the lock
// alive with the watchdog, cancels fn's context if the lock is lost, and
// releases afterwards. The error wraps ErrNotHeld if the lock was lost at any
// point before the release, because fn then ran partly unprotected.
func (lk *Locker) Do(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, l *Lock) error, opts ...Option) error {
	l, err := lk.Acquire(ctx, name, ttl, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lostErr := fmt.Errorf("lock %q lost while held: %w", name, ErrNotHeld)
	go func() {
		select {
		case <-l.Lost():
			cancel(lostErr)
		case <-ctx.Done():
		}
	}()
	l.Watch(ctx)

	fnErr := fn(ctx, l)
	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer relCancel()
	relErr := l.Release(relCtx)
	select {
	case <-l.Lost():
		relErr = lostErr
	default:
	}
	return errors.Join(fnErr, relErr)
}

// Lock is one acquisition of a named lock.
type Lock struct {
	client redis.UniversalClient
	name   string
	key    string
	token  string
	fence  int64

	lost     chan struct{}
	lostOnce sync.Once

	mu        sync.Mutex
	ttl       time.Duration
	renewedAt time.Time // when the call that last set our expiry was sent
	released  bool
	stopWatch context.CancelFunc
	watchDone chan struct{}
}

// Name is the lock's name, without the key prefix.
func (l *Lock) Name() string { return l.name }

// Token is the random value identifying this holder in Redis.
func (l *Lock) Token() string { return l.token }

// Fence is the fencing token: strictly greater than that of every earlier
// acquisition of the same name.
func (l *Lock) Fence() int64 { return l.fence }

// Lost is closed once the lock is known, or can no longer be proven, to be ours.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

func (l *Lock) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

// Renew resets the lock's expiry to ttl from now, if it is still ours; later
// watchdog renewals use this ttl too.
func (l *Lock) Renew(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("renewing lock %q: ttl %s under 1ms", l.name, ttl)
	}
	if err := l.renew(ctx, ttl); err != nil {
		return err
	}
	l.mu.Lock()
	l.ttl = ttl
	l.mu.Unlock()
	return nil
}

func (l *Lock) renew(ctx context.Context, ttl time.Duration) error {
	sent := time.Now()
	n, err := renewScript.Run(ctx, l.client, []string{l.key}, l.token, ttl.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("renewing lock %q: %w", l.name, err)
	}
	if n == 0 {
		l.markLost()
		return fmt.Errorf("renewing lock %q: %w", l.name, ErrNotHeld)
	}
	l.mu.Lock()
	if sent.After(l.renewedAt) {
		l.renewedAt = sent
	}
	l.mu.Unlock()
	return nil
}

// Release deletes the lock if it is still ours and stops the watchdog.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	l.released = true
	stop, done := l.stopWatch, l.watchDone
	l.mu.Unlock()
	if stop != nil {
		// Wait for the watchdog so no renewal lands after the delete.
		stop()
		<-done
	}
	n, err := releaseScript.Run(ctx, l.client, []string{l.key}, l.token).Int64()
	if err != nil {
		return fmt.Errorf("releasing lock %q: %w", l.name, err)
	}
	if n == 0 {
		l.markLost()
		return fmt.Errorf("releasing lock %q: %w", l.name, ErrNotHeld)
	}
	return nil
}

// Watch starts the watchdog: it renews the lock every ttl/3 until Release is
// called or ctx ends, and closes Lost as soon as a renewal finds the lock gone
// or renewals have failed for a whole ttl (the key may have expired by then).
// Calling Watch again, or after Release, does nothing.
func (l *Lock) Watch(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || l.stopWatch != nil {
		return
	}
	ctx, l.stopWatch = context.WithCancel(ctx)
	done := make(chan struct{})
	l.watchDone = done
	go func() {
		defer close(done)
		l.watch(ctx)
	}()
}

func (l *Lock) watch(ctx context.Context) {
	for {
		l.mu.Lock()
		ttl := l.ttl
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-l.lost:
			return
		case <-time.After(ttl / 3):
		}
		// A renewal that hangs past the next tick is as good as failed.
		rctx, cancel := context.WithTimeout(ctx, ttl/3)
		err := l.renew(rctx, ttl)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, ErrNotHeld), ctx.Err() != nil:
			return
		default:
			l.mu.Lock()
			expired := time.Since(l.renewedAt) >= l.ttl
			l.mu.Unlock()
			if expired {
				l.markLost()
				return
			}
		}
	}
}
