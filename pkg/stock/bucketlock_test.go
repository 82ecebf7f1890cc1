package stock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"orderpipe/pkg/lock"
	"orderpipe/pkg/stock"
)

// TestStaleBucketHolderRefused: a holder of the bucket lock whose lock
// expired (paused, cut off) and was taken by another cannot take, give,
// cancel, drop or move with its old token: every bucket's script refuses
// it once the new holder claimed the item, and nothing changes. A write
// without a token is refused too, and a held lock is not taken twice.
func TestStaleBucketHolderRefused(t *testing.T) {
	t.Parallel()
	_, s, it := nineOverThree(t, 5, 6)
	ctx := context.Background()
	stocks := func() string { t.Helper(); return mustBucketStocks(t, s, it, 3) }

	// The old holder takes, then stalls past its lock's life.
	tr := stock.Transfer{ID: "x1", From: 0, To: 2, Units: 2}
	var old int64
	if err := s.WithBuckets(ctx, it, 3, time.Second, func(ctx context.Context, fence int64) error {
		old = fence
		_, err := s.Take(ctx, it, tr, fence)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// A new holder (a fix) takes the item: its lock claims every bucket.
	cur, err := s.LockBuckets(ctx, it, 3, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Release(ctx) //nolint:errcheck
	if cur.Fence() <= old {
		t.Fatalf("new token %d not above the old %d", cur.Fence(), old)
	}
	if _, err := s.LockBuckets(ctx, it, 3, 0); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("second holder while held: %v, want %v", err, lock.ErrNotAcquired)
	}

	before := stocks()
	stale := func(step string, err error) {
		t.Helper()
		if !errors.Is(err, lock.ErrStaleFence) {
			t.Errorf("%s with the old token: %v, want %v", step, err, lock.ErrStaleFence)
		}
	}
	_, err = s.Take(ctx, it, stock.Transfer{ID: "x2", From: 1, To: 2, Units: 1}, old)
	stale("take", err)
	stale("give", s.Finish(ctx, it, tr, old))
	stale("cancel", s.Forget(ctx, it, tr, old))
	_, err = s.Move(ctx, it, 3, old)
	stale("move", err)
	if _, err := s.Take(ctx, it, stock.Transfer{ID: "x3", From: 1, To: 2, Units: 1}, 0); err == nil {
		t.Error("a take without a token was run")
	}
	if got := stocks(); got != before || before != "[1 3 3]" {
		t.Errorf("buckets %s after the stale steps, want them as before: [1 3 3]", got)
	}
	if ts, err := s.Transfers(ctx, it, 3); err != nil || len(ts) != 1 || ts[0].Given {
		t.Fatalf("transfers %+v %v; want x1 still pending", ts, err)
	}
	// The current holder's token works.
	if err := s.Finish(ctx, it, tr, cur.Fence()); err != nil {
		t.Fatal(err)
	}
	if got := stocks(); got != "[1 3 5]" {
		t.Errorf("after the current holder's give: %s, want [1 3 5]", got)
	}
}

// TestBucketLockCounterLost: Redis lost the bucket lock's fencing counter
// (its slot restarted empty) while the buckets' fences remember a newer
// token: the next holder's counter is first raised above them, so it is
// not refused for ever.
func TestBucketLockCounterLost(t *testing.T) {
	t.Parallel()
	r, s := mustStore(t)
	ctx := context.Background()
	it := stock.Item{ActivityID: 5, ItemID: 7}
	mustPreheat(t, s, openSale(it, 6, 1, 2))
	var first int64
	for range 3 {
		if err := s.WithBuckets(ctx, it, 2, time.Second, func(_ context.Context, fence int64) error { first = fence; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Client.Del(ctx, r.Prefix+"fence:"+it.BucketLockName()).Err(); err != nil {
		t.Fatal(err)
	}
	err := s.WithBuckets(ctx, it, 2, time.Second, func(ctx context.Context, fence int64) error {
		if fence <= first {
			return fmt.Errorf("token %d after the loss, not above %d", fence, first)
		}
		_, err := s.Take(ctx, it, stock.Transfer{ID: "y", From: 0, To: 1, Units: 1}, fence)
		return err
	})
	if err != nil {
		t.Errorf("after the counter was lost: %v", err)
	}
}
