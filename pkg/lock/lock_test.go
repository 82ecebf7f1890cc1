package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"orderpipe/pkg/lock"
	"orderpipe/pkg/testenv"
)

// mustLocker is a Locker whose keys carry the test's own prefix.
func mustLocker(tb testing.TB) (testenv.Redis, *lock.Locker) {
	tb.Helper()
	r := testenv.MustRedis(tb)
	return r, lock.New(r.Client, r.Prefix)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestExpiredHolderCannotTouchNewHolder(t *testing.T) {
	t.Parallel()
	r, lk := mustLocker(t)
	ctx := t.Context()
	key := r.Prefix + "lock:job"

	old, err := lk.TryAcquire(ctx, "job", 100*time.Millisecond)
	if err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	testenv.WaitFor(t, 5*time.Second, "the first lock to expire", func() bool {
		return r.Client.Exists(ctx, key).Val() == 0
	})
	cur, err := lk.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatalf("second acquire: %v", err)
	}

	if err := old.Renew(ctx, time.Hour); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("stale Renew = %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("stale Release = %v, want ErrNotHeld", err)
	}
	if !isClosed(old.Lost()) {
		t.Error("stale holder's Lost channel is open")
	}
	if got := r.Client.Get(ctx, key).Val(); !strings.HasPrefix(got, cur.Token()+":") {
		t.Fatalf("key holds %q, want the new holder's token %q", got, cur.Token())
	}
	if pttl := r.Client.PTTL(ctx, key).Val(); pttl <= 0 || pttl > time.Minute {
		t.Errorf("new holder's PTTL = %s, want (0, 1m]: the stale Renew must not extend it", pttl)
	}
	if cur.Fence() <= old.Fence() {
		t.Errorf("fences %d then %d, want strictly increasing", old.Fence(), cur.Fence())
	}
	if cur.Token() == old.Token() {
		t.Error("two acquisitions got the same token")
	}
	if err := cur.Release(ctx); err != nil {
		t.Fatalf("new holder Release: %v", err)
	}
	if n := r.Client.Exists(ctx, key).Val(); n != 0 {
		t.Error("key still exists after Release")
	}
}

func TestWatchdog(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	r, lk := mustLocker(t)

	t.Run("KeepsLockThroughLongTask", func(t *testing.T) {
		ctx := t.Context()
		key := r.Prefix + "lock:long"
		l, err := lk.TryAcquire(ctx, "long", ttl)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		l.Watch(ctx)
		// The task: three ttls of work, checking the lock stays ours throughout.
		for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(ttl / 10) {
			if got := r.Client.Get(ctx, key).Val(); !strings.HasPrefix(got, l.Token()+":") {
				t.Fatalf("key holds %q mid-task, want our token", got)
			}
			if isClosed(l.Lost()) {
				t.Fatal("watchdog reported the lock lost mid-task")
			}
		}
		if _, err := lk.TryAcquire(ctx, "long", ttl); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("contender after 3×ttl: %v, want ErrNotAcquired", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if n := r.Client.Exists(ctx, key).Val(); n != 0 {
			t.Error("key still exists after Release")
		}
		if isClosed(l.Lost()) {
			t.Error("a clean Release closed Lost")
		}
	})

	t.Run("WithoutWatchdogExpires", func(t *testing.T) {
		ctx := t.Context()
		l, err := lk.TryAcquire(ctx, "short", ttl)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		testenv.WaitFor(t, 20*ttl, "the unwatched lock to expire", func() bool {
			return r.Client.Exists(ctx, r.Prefix+"lock:short").Val() == 0
		})
		if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Release of expired lock = %v, want ErrNotHeld", err)
		}
	})
}

func TestDoCancelsFnWhenLockIsLost(t *testing.T) {
	t.Parallel()
	r, lk := mustLocker(t)
	ctx := t.Context()
	key := r.Prefix + "lock:stolen"

	err := lk.Do(ctx, "stolen", 300*time.Millisecond, func(ctx context.Context, l *lock.Lock) error {
		// As if our lock had expired and another process had taken it.
		if err := r.Client.Set(ctx, key, "intruder", time.Minute).Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, lock.ErrNotHeld) {
				t.Errorf("fn context cause = %v, want ErrNotHeld", cause)
			}
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("fn context still live 10s after the lock was taken over")
		}
	})
	if !errors.Is(err, lock.ErrNotHeld) || !errors.Is(err, context.Canceled) {
		t.Errorf("Do = %v, want ErrNotHeld and context.Canceled", err)
	}
	if got := r.Client.Get(ctx, key).Val(); got != "intruder" {
		t.Errorf("key holds %q after Do, want the intruder's lock untouched", got)
	}
}

func TestFencesStrictlyIncrease(t *testing.T) {
	t.Parallel()
	_, lk := mustLocker(t)
	ctx := t.Context()
	var prev int64
	for i := range 10 {
		l, err := lk.TryAcquire(ctx, "seq", time.Minute)
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if l.Fence() <= prev {
			t.Fatalf("acquire %d: fence %d after %d, want strictly increasing", i, l.Fence(), prev)
		}
		prev = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
}

func TestDoOneHolderAtATime(t *testing.T) {
	t.Parallel()
	const contenders = 20
	_, lk := mustLocker(t)
	ctx := t.Context()

	var (
		holders, maxHolders, ran atomic.Int32
		mu                       sync.Mutex
		fences                   []int64 // in the order holders ran
		wg                       sync.WaitGroup
	)
	errs := make(chan error, contenders)
	for range contenders {
		wg.Go(func() {
			errs <- lk.Do(ctx, "singleton", 5*time.Second, func(ctx context.Context, l *lock.Lock) error {
				n := holders.Add(1)
				defer holders.Add(-1)
				for m := maxHolders.Load(); n > m && !maxHolders.CompareAndSwap(m, n); m = maxHolders.Load() {
				}
				mu.Lock()
				fences = append(fences, l.Fence())
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // hold the lock while the others contend
				ran.Add(1)
				return nil
			}, lock.WithBackoff(time.Millisecond, 20*time.Millisecond), lock.WithMaxWait(time.Minute))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Do: %v", err)
		}
	}
	if got := maxHolders.Load(); got != 1 {
		t.Errorf("max concurrent holders = %d, want 1", got)
	}
	if got := ran.Load(); got != contenders {
		t.Errorf("%d of %d contenders ran", got, contenders)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("fences in run order %v, want strictly increasing", fences)
			break
		}
	}
}

func TestAcquireFailsFastWhenHeld(t *testing.T) {
	t.Parallel()
	r, lk := mustLocker(t)
	ctx := t.Context()
	holder, err := lk.TryAcquire(ctx, "busy", time.Minute)
	if err != nil {
		t.Fatalf("holder acquire: %v", err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name    string
		acquire func() (*lock.Lock, error)
		want    error
		inMsg   string
	}{
		{"MaxAttempts", func() (*lock.Lock, error) {
			return lk.Acquire(ctx, "busy", time.Minute, lock.WithBackoff(time.Millisecond, 5*time.Millisecond), lock.WithMaxAttempts(4))
		}, lock.ErrNotAcquired, `"busy": 4 attempts`},
		{"MaxWait", func() (*lock.Lock, error) {
			return lk.Acquire(ctx, "busy", time.Minute, lock.WithBackoff(time.Millisecond, 5*time.Millisecond), lock.WithMaxWait(50*time.Millisecond))
		}, lock.ErrNotAcquired, `"busy"`},
		{"TryAcquire", func() (*lock.Lock, error) {
			return lk.TryAcquire(ctx, "busy", time.Minute)
		}, lock.ErrNotAcquired, `"busy"`},
		{"ContextCancelled", func() (*lock.Lock, error) {
			return lk.Acquire(cancelled, "busy", time.Minute, lock.WithMaxWait(0))
		}, context.Canceled, `"busy"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.acquire()
			if !errors.Is(err, tc.want) || l != nil {
				t.Fatalf("got lock %t, err %v; want no lock, %v", l != nil, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.inMsg) {
				t.Errorf("error %q does not mention %s", err, tc.inMsg)
			}
		})
	}
	if got := r.Client.Get(ctx, r.Prefix+"lock:busy").Val(); !strings.HasPrefix(got, holder.Token()+":") {
		t.Errorf("key holds %q, want the holder's token", got)
	}
	if err := holder.Release(ctx); err != nil {
		t.Errorf("holder Release: %v", err)
	}
}

// TestRaiseFence: a counter below the recorded token (lost with Redis) is
// put FenceMargin above it, so the next token is newer than any a holder
// may carry; a counter at or above it is left alone.
func TestRaiseFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, lk := mustLocker(t)
	raised, err := lk.RaiseFence(ctx, "raise", 7)
	if err != nil || !raised {
		t.Fatalf("empty counter: raised %v, %v", raised, err)
	}
	l, err := lk.TryAcquire(ctx, "raise", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Fence(); got != 7+lock.FenceMargin+1 {
		t.Errorf("token after the raise %d, want %d", got, 7+lock.FenceMargin+1)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if raised, err := lk.RaiseFence(ctx, "raise", 9); err != nil || raised {
		t.Errorf("counter above the recorded token: raised %v, %v", raised, err)
	}
	l, err = lk.TryAcquire(ctx, "raise", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Fence(); got != 7+lock.FenceMargin+2 {
		t.Errorf("next token %d, want %d (untouched counter)", got, 7+lock.FenceMargin+2)
	}
}
