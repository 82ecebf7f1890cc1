package lock

import (
	"errors"
	"testing"
	"time"

	"orderpipe/pkg/testenv"
)

// TestAcquireSurvivesAResend: a Cluster client runs a script again when the
// first run's reply was lost (a timeout, a dropped connection), whatever
// MaxRetries says. The second run of one acquisition must answer as the
// first did: the lock, with the same fencing token, then released as usual;
// the counter moved once.
func TestAcquireSurvivesAResend(t *testing.T) {
	t.Parallel()
	r := testenv.MustRedis(t)
	lk := New(r.Client, r.Prefix)
	ctx := t.Context()
	l, err := lk.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	again, err := acquireScript.Run(ctx, r.Client, []string{l.key, r.Prefix + "fence:job"}, l.token, time.Minute.Milliseconds()).Int64()
	if err != nil {
		t.Fatalf("resent acquire: %v", err)
	}
	if again != l.Fence() {
		t.Fatalf("resent acquire answered fence %d, want the first run's %d (0 leaks the lock until its ttl)", again, l.Fence())
	}
	if _, err := lk.TryAcquire(ctx, "job", time.Minute); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("another holder while the lock is held: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after the resend: %v", err)
	}
	if n := r.Client.Exists(ctx, l.key).Val(); n != 0 {
		t.Fatal("the lock is still held after its release")
	}
	next, err := lk.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatalf("acquire after the release: %v", err)
	}
	if next.Fence() != l.Fence()+1 {
		t.Fatalf("next fence %d, want %d: the resend must not move the counter", next.Fence(), l.Fence()+1)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
