package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/tick"
)

// The mover keeps a bucketed item's stock from being stranded: users are
// routed to buckets by their id, so one bucket can sell out while others
// still hold units. Every Interval, for each bucketed item with an empty
// bucket and a bucket of at least 2 units, it moves half of the richest
// bucket's units to the empty one (stock.Store.Move: take on the source
// under a transfer id, give on the target unless given, drop the record).
// It moves units, never users, so the per-user limit stays exact. Each item
// is moved under its Postgres stock row lock, which keeps the reconciler's
// check from seeing a move half done, and under the item's bucket lock
// (stock.WithBuckets), whose fencing token every Redis step carries, which
// keeps movers and the reconciler's fix off one item's buckets at once even
// when the row lock is lost with a Postgres connection; the item is skipped
// while another holds either. A mover killed between take and give leaves
// the record, and the next pass (of any replica) or a fix finishes the
// transfer; a mover whose lock expired meanwhile is refused by every bucket.

// MoverConfig is the mover's configuration.
type MoverConfig struct {
	// Interval is the pause between passes (MOVE_INTERVAL).
	Interval time.Duration
}

// Mover moves stock between the buckets of bucketed items.
type Mover struct {
	cfg    MoverConfig
	orders *order.Store
	stock  *stock.Store
	log    *slog.Logger
}

// NewMover builds a mover.
func NewMover(cfg MoverConfig, orders *order.Store, st *stock.Store, log *slog.Logger) *Mover {
	if cfg.Interval <= 0 {
		cfg.Interval = moveIntervalVar.Duration()
	}
	if log == nil {
		log = slog.Default()
	}
	return &Mover{cfg: cfg, orders: orders, stock: st, log: log}
}

// MoveResult counts one pass.
type MoveResult struct {
	Items int   // bucketed items looked at
	Moved int64 // units moved by new transfers
	Busy  int   // items skipped: their row or bucket lock was held
}

// Run passes every Interval until ctx ends.
func (m *Mover) Run(ctx context.Context) error {
	tick.Every(ctx, m.cfg.Interval, func() { m.pass(ctx) })
	return nil
}

// pass is RunOnce, logged: a failure, or the units it moved.
func (m *Mover) pass(ctx context.Context) {
	res, err := m.RunOnce(ctx)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		m.log.Warn("mover pass failed", "err", err)
	case res.Moved > 0:
		m.log.Info("moved stock between buckets", "units", res.Moved, "items", res.Items)
	}
}

// RunOnce is one pass over the bucketed items.
func (m *Mover) RunOnce(ctx context.Context) (MoveResult, error) {
	var res MoveResult
	items, err := m.orders.BucketedItems(ctx, stock.StockGrace)
	if err != nil {
		return res, err
	}
	var errs []error
	for _, si := range items {
		res.Items++
		it := stock.Item{ActivityID: si.ActivityID, ItemID: si.ItemID}
		need, err := m.stock.NeedsMove(ctx, it, si.Buckets)
		if err != nil || !need {
			errs = append(errs, err)
			continue
		}
		var moved int64
		busy := false
		locked, err := m.orders.WithItemRow(ctx, si.ActivityID, si.ItemID, func(ctx context.Context) error {
			err := m.stock.WithBuckets(ctx, it, si.Buckets, 0, func(ctx context.Context, fence int64) error {
				var err error
				moved, err = m.stock.Move(ctx, it, si.Buckets, fence)
				return err
			})
			if errors.Is(err, lock.ErrNotAcquired) {
				busy = true // a fix, or another mover that lost its row lock
				return nil
			}
			return err
		})
		if (!locked || busy) && err == nil {
			res.Busy++
		}
		res.Moved += moved
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}
