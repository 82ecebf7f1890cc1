package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"orderpipe/pkg/lock"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
)

// The fix-move fault: `orderpipe reconciler --once --fix` during moves, with
// a mover killed between take and give. The workers' movers move units when
// a bucket empties, but the step between a take and its give is one Redis
// round trip, too short to SIGKILL a worker in it on purpose; so the fault
// is that mover itself, through the same store calls: for each item it takes
// the item's bucket lock, takes half of the richest bucket's units for the
// poorest and stops there, its lock left to run out. It also nudges each
// item's sale window in Redis by a millisecond, so the fix has to act on an
// item whose stock sums agree while its units are in transit (the case in
// which a fix once reset the buckets to what it had read before finishing
// the transfer, and the units vanished). Then the fix runs, racing the
// workers' movers, which take the item over once the dead mover's lock has
// expired. At last the dead mover comes back (it was only paused): its give,
// with its old fencing token, must be refused wherever a newer holder has
// claimed the bucket. The audit then holds I5 over the buckets as always.
// With one bucket there is no move: the fault is a fix during the load.

// fixMoveFaults: about one every 10 s, from a stream of its own, so the
// seeds' other faults are the same as without it; For is how long the dead
// mover lies there before the fix starts.
func fixMoveFaults(seed uint64, loadFor time.Duration) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x6669786d6f7665))
	return schedule(rng, loadFor, 10*time.Second, func() fault {
		return fault{Kind: "fix-move", Target: "reconciler", For: between(rng, 100*time.Millisecond, 2*time.Second)}
	}, func(fault) time.Duration { return 0 })
}

// deadMove is a transfer the fault's mover took and did not give.
type deadMove struct {
	it    stock.Item
	t     stock.Transfer
	fence int64
}

// fixDuringMove is the fix-move fault on sale act.
func (s *Suite) fixDuringMove(ctx context.Context, f fault, act int64) (string, error) {
	at := s.since()
	var notes []string
	var errs []error
	var dead []deadMove
	for _, item := range []int64{1, 2} {
		it := stockItem(act, item)
		if s.cfg.Buckets > 1 {
			d, note, err := s.dieMidMove(ctx, it)
			notes = append(notes, note)
			errs = append(errs, err)
			if d != nil {
				dead = append(dead, *d)
			}
		}
		// Drift for another reason than the stock: a sale window 1 ms wider.
		errs = append(errs, stocktest.ShiftSaleStart(ctx, s.sr, it, -1))
	}
	time.Sleep(f.For)
	fixAt := s.since()
	// A fix that could not run (exit 2: Redis or Postgres cut by another
	// fault just then) is run again, as an operator would: the window the
	// fault nudged is drift only a fix repairs.
	code, out := s.reconcile(ctx, "--fix")
	runs := 1
	for ; code == 2 && runs < 5 && ctx.Err() == nil; runs++ {
		time.Sleep(time.Second)
		code, out = s.reconcile(ctx, "--fix")
	}
	desc := fmt.Sprintf("fix-move at %s: %s; reconciler --once --fix at %s exit %d after %d run(s) (done %s)", at, strings.Join(notes, ", "),
		fixAt, code, runs, s.since())
	if code != 0 {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		desc += ": " + strings.Join(lines[max(0, len(lines)-4):], " | ")
	}
	for _, d := range dead {
		note, err := s.staleGive(ctx, d)
		desc += "; " + note
		errs = append(errs, err)
	}
	return desc, errors.Join(errs...)
}

// dieMidMove takes the item's bucket lock and half of its richest bucket's
// units for its poorest, and stops: a mover killed between take and give.
// Nothing is taken while another holds the lock or nothing is to be had.
func (s *Suite) dieMidMove(ctx context.Context, it stock.Item) (*deadMove, string, error) {
	B := s.cfg.Buckets
	l, err := s.stock.LockBuckets(ctx, it, B, 0)
	if errors.Is(err, lock.ErrNotAcquired) {
		return nil, fmt.Sprintf("item %d: bucket lock busy, no dead mover", it.ItemID), nil
	}
	if err != nil {
		return nil, fmt.Sprintf("item %d: no dead mover", it.ItemID), err
	}
	stocks, err := s.stock.BucketStocks(ctx, it, B)
	if err != nil {
		return nil, fmt.Sprintf("item %d: no dead mover", it.ItemID), err
	}
	from, to := -1, -1
	for b, n := range stocks {
		if n == nil {
			return nil, fmt.Sprintf("item %d: bucket %d has no stock key, no dead mover", it.ItemID, b), nil
		}
		if from < 0 || *n > *stocks[from] {
			from = b
		}
		if to < 0 || *n < *stocks[to] {
			to = b
		}
	}
	if from == to || *stocks[from] < 1 {
		return nil, fmt.Sprintf("item %d: nothing to move, no dead mover", it.ItemID), nil
	}
	t := stock.Transfer{ID: fmt.Sprintf("chaos-%d", time.Now().UnixNano()), From: from, To: to, Units: max(*stocks[from]/2, 1)}
	took, err := s.stock.Take(ctx, it, t, l.Fence())
	if err != nil || !took {
		return nil, fmt.Sprintf("item %d: take of %d from bucket %d not done", it.ItemID, t.Units, from), err
	}
	// Killed here: no give, no release; the lock runs out by itself.
	return &deadMove{it: it, t: t, fence: l.Fence()}, fmt.Sprintf("item %d: a mover took %d units from bucket %d for bucket %d (token %d) and died",
		it.ItemID, t.Units, from, to, l.Fence()), nil
}

// staleGive is the dead mover coming back: its give carries its old token,
// and must be refused once a newer holder claimed the target bucket.
func (s *Suite) staleGive(ctx context.Context, d deadMove) (string, error) {
	dst := d.it
	dst.Bucket = d.t.To
	fence, err := stocktest.BucketFence(ctx, s.sr, dst) // 0: Redis lost it, nobody claimed since
	if err != nil {
		return fmt.Sprintf("item %d: the dead mover's fence unreadable", d.it.ItemID), err
	}
	err = s.stock.Finish(ctx, d.it, d.t, d.fence)
	switch {
	case errors.Is(err, lock.ErrStaleFence):
		return fmt.Sprintf("item %d: the dead mover's give with token %d refused (bucket fence %d)", d.it.ItemID, d.fence, fence), nil
	case err != nil:
		return fmt.Sprintf("item %d: the dead mover's give failed", d.it.ItemID), err
	case fence > d.fence:
		return fmt.Sprintf("item %d: the dead mover's give with token %d ACCEPTED", d.it.ItemID, d.fence),
			fmt.Errorf("a give with token %d ran on a bucket claimed with %d", d.fence, fence)
	}
	return fmt.Sprintf("item %d: the dead mover's give ran (nobody had claimed the item yet)", d.it.ItemID), nil
}
