package order_test

import (
	"errors"
	"testing"
	"time"

	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/testenv"
)

// A lock's fencing tokens as Postgres sees them: the newest holder's writes
// commit, again and again; the older holder's are refused.
func TestStaleFenceRefusedByPostgres(t *testing.T) {
	t.Parallel()
	db := testenv.MustDatabase(t)
	r := testenv.MustRedis(t)
	lk := lock.New(r.Client, r.Prefix)
	ctx := t.Context()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE fenced_writes (holder text NOT NULL, token bigint NOT NULL)`); err != nil {
		t.Fatalf("creating test table: %v", err)
	}
	write := func(l *lock.Lock, holder string) error {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if err := l.CheckFence(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO fenced_writes VALUES ($1, $2)`, holder, l.Fence()); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}

	old, err := lk.TryAcquire(ctx, "fix", 100*time.Millisecond)
	if err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	testenv.WaitFor(t, 5*time.Second, "the first lock to expire", func() bool {
		return r.Client.Exists(ctx, r.Prefix+"lock:fix").Val() == 0
	})
	cur, err := lk.TryAcquire(ctx, "fix", time.Minute)
	if err != nil {
		t.Fatalf("second acquire: %v", err)
	}
	if cur.Fence() <= old.Fence() {
		t.Fatalf("fences %d then %d, want strictly increasing", old.Fence(), cur.Fence())
	}

	if err := write(cur, "new"); err != nil {
		t.Fatalf("write with the newest token: %v", err)
	}
	if err := write(cur, "new-again"); err != nil {
		t.Fatalf("second write by the same holder: %v", err)
	}
	if err := write(old, "old"); !errors.Is(err, lock.ErrStaleFence) {
		t.Fatalf("write with stale token = %v, want ErrStaleFence", err)
	}

	var oldRows, newRows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE holder = 'old'), count(*) FILTER (WHERE holder <> 'old') FROM fenced_writes`).Scan(&oldRows, &newRows); err != nil {
		t.Fatalf("counting writes: %v", err)
	}
	if oldRows != 0 || newRows != 2 {
		t.Errorf("writes: %d stale, %d current; want 0 and 2", oldRows, newRows)
	}
	stored, err := order.NewStore(db.Pool).RecordedFence(ctx, "fix")
	if err != nil {
		t.Fatal(err)
	}
	if stored != cur.Fence() {
		t.Errorf("lock_fences token = %d, want %d", stored, cur.Fence())
	}
}
