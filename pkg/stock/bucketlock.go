package stock

// The bucket lock: the mover and the reconciler's fix both write several
// buckets of one item from what they read of all of them, so they must never
// act on one item at once. The item's stock row lock in Postgres keeps them
// apart only while both still talk to Postgres: a mover whose connection is
// cut (or that is paused past the server's patience) loses the row lock and
// carries on in Redis. So whoever acts on an item's buckets holds the item's
// bucket lock (pkg/lock: SET NX PX with a token, a watchdog, a fencing token)
// and, before it reads, claims every bucket for its fencing token (fence.lua);
// every script that writes a bucket for them (take, give, drop and the
// reconciler's fix) compares the token with the bucket's fence inside Redis,
// so a holder whose lock expired is refused by every bucket the moment a new
// holder has claimed the item.

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/lock"
)

// BucketLockTTL is the bucket lock's lifetime, renewed by its watchdog while
// held: a mover killed in the middle of a move keeps the item from a fix
// (which waits for it) that long at most.
const BucketLockTTL = 5 * time.Second

// fenceLifetime is the shortest life of a bucket's fence (it lives as long
// as the bucket's stock, when that is longer): a holder paused longer than
// that after its lock expired is not refused.
const fenceLifetime = 24 * time.Hour

var (
	//go:embed fence.lua
	fenceLua string
	//go:embed drop.lua
	dropLua string

	fenceScript = redis.NewScript(fenceLua)
	dropScript  = redis.NewScript(dropLua)
)

// BucketLockName is the name (pkg/lock) of the item's bucket lock; bucket
// 0's hash tag keeps its keys in one slot.
func (it Item) BucketLockName() string { return it.Base().Tag() + ":buckets" }

// LockBuckets takes the item's bucket lock, waiting up to wait for another
// holder (0: one attempt; lock.ErrNotAcquired when held), and claims every
// one of its buckets for the lock's fencing token. The caller renews
// (Watch) and releases it; WithBuckets does all of that.
func (s *Store) LockBuckets(ctx context.Context, it Item, buckets int, wait time.Duration) (*lock.Lock, error) {
	buckets = max(buckets, 1)
	lk := lock.New(s.rdb, s.prefix)
	name := it.BucketLockName()
	// The counter restarts low when Redis loses its slot (an empty restart,
	// a failover to a lagging replica) while the buckets' fences, elsewhere
	// on a cluster, remember higher tokens: every new holder would be
	// refused for ever. The counter is first put above the fences.
	newest, err := s.newestFence(ctx, it, buckets)
	if err != nil {
		return nil, err
	}
	if _, err := lk.RaiseFence(ctx, name, newest); err != nil {
		return nil, err
	}
	opts := []lock.Option{lock.WithMaxWait(wait)}
	if wait <= 0 {
		opts = []lock.Option{lock.WithMaxAttempts(1)}
	}
	l, err := lk.Acquire(ctx, name, BucketLockTTL, opts...)
	if err != nil {
		return nil, err
	}
	for b := range buckets {
		bi := it
		bi.Bucket = b
		k := s.keys(bi)
		ok, err := fenceScript.Run(ctx, s.rdb, []string{k.Fence(), k.Stock}, l.Fence(), fenceLifetime.Milliseconds()).Int64()
		if err == nil && ok != 1 {
			err = fmt.Errorf("bucket %d holds a newer token than %d: %w", b, l.Fence(), lock.ErrStaleFence)
		}
		if err != nil {
			relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			l.Release(relCtx) //nolint:errcheck // it expires anyway
			cancel()
			return nil, fmt.Errorf("claiming bucket %d of %s: %w", b, it, err)
		}
	}
	return l, nil
}

// WithBuckets runs fn holding the item's bucket lock (LockBuckets, then
// renewed by its watchdog and released after fn). fn passes fence to every
// bucket write; fn's context ends if the lock is lost.
func (s *Store) WithBuckets(ctx context.Context, it Item, buckets int, wait time.Duration,
	fn func(ctx context.Context, fence int64) error) error {
	l, err := s.LockBuckets(ctx, it, buckets, wait)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-l.Lost():
			cancel(fmt.Errorf("bucket lock of %s lost while held: %w", it, lock.ErrNotHeld))
		case <-ctx.Done():
		}
	}()
	l.Watch(ctx)
	fnErr := fn(ctx, l.Fence())
	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer relCancel()
	return errors.Join(fnErr, l.Release(relCtx))
}

// newestFence is the highest fence over the item's buckets.
func (s *Store) newestFence(ctx context.Context, it Item, buckets int) (int64, error) {
	cmds := make([]*redis.StringCmd, buckets)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := range cmds {
			bi := it
			bi.Bucket = b
			cmds[b] = p.Get(ctx, s.keys(bi).Fence())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("reading the bucket fences of %s: %w", it, err)
	}
	var newest int64
	for _, c := range cmds {
		if n, err := strconv.ParseInt(c.Val(), 10, 64); err == nil {
			newest = max(newest, n)
		}
	}
	return newest, nil
}

// checkFence refuses a missing token before any script runs: an unfenced
// write is exactly what the bucket lock is there to prevent.
func checkFence(fence int64) error {
	if fence <= 0 {
		return fmt.Errorf("bucket write without a fencing token (%d): hold the bucket lock", fence)
	}
	return nil
}

// staleErr is the error of a script that refused the token.
func staleErr(step string, it Item, bucket int, fence int64) error {
	return fmt.Errorf("%s on %s bucket %d with token %d: a newer holder claimed the bucket: %w", step, it, bucket, fence, lock.ErrStaleFence)
}
