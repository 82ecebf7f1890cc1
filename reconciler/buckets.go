package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"orderpipe/pkg/event"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// A bucketed item (pkg/stock/buckets.go) is checked bucket by bucket with
// the same script, under the item's stock row lock held for all of them: no
// order of the item commits meanwhile, and the mover, which moves units
// between buckets under the same lock, cannot move half-way through the
// read. I5 holds for the sum: Σ bucket stocks = DB stock − Σ in flight over
// the buckets − units in transfer (taken from a bucket by a mover that died
// before giving them). Each user's marker is checked in the user's bucket.
//
// A fix holds the item's bucket lock besides (pkg/stock/bucketlock.go), so
// no mover acts on the buckets while it does, even one that lost its
// Postgres connection and with it the row lock; every Redis write of the
// fix carries the lock's fencing token. Under both locks it first finishes
// the transfers a dead mover left (or cancels those whose target lost its
// stock key), then reads the buckets as a check does, so what it writes
// starts from the stock after the transfers. If the sum drifts or a bucket's
// stock is missing, it gives each bucket its share of what Postgres says is
// for sale (the preheat split of DB stock − in flight); sale and markers
// are repaired per bucket as for one bucket.

// bucketedItem is item for an item of more than one bucket.
func (r *Reconciler) bucketedItem(ctx context.Context, si order.SaleItem, markers markerView, l *lock.Lock) (ItemReport, error) {
	if l == nil {
		return r.buckets(ctx, si, markers, nil, 0)
	}
	base := stock.Item{ActivityID: si.ActivityID, ItemID: si.ItemID}
	rep := ItemReport{ActivityID: si.ActivityID, ItemID: si.ItemID, Buckets: si.Buckets}
	err := r.deps.Stock.WithBuckets(ctx, base, si.Buckets, r.cfg.LockWait, func(ctx context.Context, fence int64) error {
		var err error
		rep, err = r.buckets(ctx, si, markers, l, fence)
		return err
	})
	return rep, err
}

// buckets checks a bucketed item; with l (and the bucket lock's fence) it
// fixes it.
func (r *Reconciler) buckets(ctx context.Context, si order.SaleItem, markers markerView, l *lock.Lock, fence int64) (ItemReport, error) {
	base := stock.Item{ActivityID: si.ActivityID, ItemID: si.ItemID}
	B := si.Buckets
	opts := order.LockOptions{LockTimeout: r.cfg.RowLockTimeout}
	if l != nil {
		opts.FenceFunc = func(ctx context.Context, tx order.Execer) error { return l.CheckFence(ctx, tx) }
	}
	rep := ItemReport{ActivityID: si.ActivityID, ItemID: si.ItemID, Buckets: B, MarkerIndex: markers.state(base)}
	if l != nil {
		if err := r.restoreBucketDedup(ctx, base, B, &rep); err != nil {
			return rep, err
		}
	}
	err := r.deps.Orders.WithItemLocked(ctx, si.ActivityID, si.ItemID, opts, func(ctx context.Context, li *order.LockedItem) error {
		if l == nil {
			return r.bucketsLocked(ctx, li, base, B, markers, -1, &rep)
		}
		if err := r.finishTransfers(ctx, base, B, fence); err != nil {
			return err
		}
		return r.bucketsLocked(ctx, li, base, B, markers, fence, &rep)
	})
	return rep, err
}

// bucketsLocked checks the B buckets of base under the item's row lock
// into rep; with a fence (≥ 0: the bucket lock is held) it fixes what
// drifted.
func (r *Reconciler) bucketsLocked(ctx context.Context, li *order.LockedItem, base stock.Item, B int, markers markerView, fence int64, rep *ItemReport) error {
	bs := make([]bucketCheck, B)
	var inflight, redis int64
	stockKey, sale := "ok", "ok"
	for b := range B {
		it := base
		it.Bucket = b
		c, err := r.checkBucket(ctx, li, markers, it, B)
		if err != nil {
			return err
		}
		bs[b] = c
		if c.rep.RedisStock != nil {
			redis += *c.rep.RedisStock
		}
		inflight += c.rep.InFlight
		stockKey, sale = rep.addBucket(c.rep, stockKey, sale)
	}
	if n, _, err := r.deps.Stock.Buckets(ctx, base); (err != nil || n != B) && sale == "ok" {
		sale = "differs" // the gateway would route by another count
	}
	transfers, err := r.deps.Stock.Transfers(ctx, base, B)
	if err != nil {
		return err
	}
	for _, t := range transfers {
		if !t.Given {
			rep.InTransit += t.Units
		}
	}
	rep.DBStock = li.Stock
	rep.InFlight = inflight + rep.InTransit
	rep.ExpectedRedisStock = li.Stock - rep.InFlight
	rep.StockKey = stockKey
	if stockKey == "ok" {
		rep.RedisStock = &redis
	}
	rep.Drift = redis - rep.ExpectedRedisStock
	rep.Sale = sale
	// An incomplete marker index is fixed without drift too: the fix
	// script completes it (stock and sale then stay as read).
	if fence < 0 || !rep.Drifted() && rep.MarkerIndex != "incomplete" {
		return nil
	}
	// No transfer is left (finished before, and no mover can start one
	// while the bucket lock is held); one that is means the lock did not
	// hold, and the shares would count its units twice.
	if len(transfers) > 0 {
		return fmt.Errorf("fixing %s: %d transfers appeared under the bucket lock", base, len(transfers))
	}
	return r.fixBuckets(ctx, base, bs, rep.Drift != 0 || stockKey != "ok", max(li.Stock-inflight, 0), fence)
}

// bucketCheck is one bucket's check under the item's row lock.
type bucketCheck struct {
	want stock.Expected
	rep  ItemReport
	cur  int64 // stock as read
}

// checkBucket checks bucket it of a B-bucket item against what Postgres
// holds of it: its users' live orders and markers, its journal's requests
// Postgres created, its pending compensations.
func (r *Reconciler) checkBucket(ctx context.Context, li *order.LockedItem, markers markerView, it stock.Item, B int) (bucketCheck, error) {
	rids, err := r.deps.Stock.JournalIDs(ctx, it)
	if err != nil {
		return bucketCheck{}, err
	}
	created, err := li.CreatedAmong(ctx, rids)
	if err != nil {
		return bucketCheck{}, err
	}
	users := slices.Clone(markers.users[it])
	for u := range li.Live {
		if stock.BucketOf(u, B) == it.Bucket {
			users = append(users, u)
		}
	}
	slices.Sort(users)
	users = slices.Compact(users)
	var comps []order.Compensation
	for _, c := range li.Pending {
		if stock.BucketOf(c.UserID, B) == it.Bucket {
			comps = append(comps, c)
		}
	}
	want := expected(li, 0, created, comps, users)
	want.Buckets, want.Scanned = B, markers.scanned[it]
	o, err := r.deps.Stock.Check(ctx, it, want)
	if err != nil {
		return bucketCheck{}, err
	}
	c := bucketCheck{want: want}
	decode(o, 0, &c.rep)
	if c.rep.RedisStock != nil {
		c.cur = *c.rep.RedisStock
	}
	return c, nil
}

// addBucket adds a bucket's findings to the item's report, and its stock
// key's and sale's states to the item's so far (missing wins over any
// other finding, any finding over ok).
func (rep *ItemReport) addBucket(br ItemReport, stockKey, sale string) (string, string) {
	rep.InFlightReservations += br.InFlightReservations
	rep.PendingCompensations += br.PendingCompensations
	rep.UnreadableEntries += br.UnreadableEntries
	rep.MissingMarkers = append(rep.MissingMarkers, br.MissingMarkers...)
	rep.ExtraMarkers = append(rep.ExtraMarkers, br.ExtraMarkers...)
	rep.WrongMarkers = append(rep.WrongMarkers, br.WrongMarkers...)
	if br.StockKey != "ok" && stockKey == "ok" || br.StockKey == "missing" {
		stockKey = br.StockKey
	}
	if br.Sale != "ok" && sale != "missing" {
		sale = br.Sale
	}
	return stockKey, sale
}

// fixBuckets fixes every bucket: with resetStock the stock split anew into
// shares of available (Postgres's stock less what was in flight at the
// check), else each bucket's stock as read; markers, index and sale as the
// check wanted them.
func (r *Reconciler) fixBuckets(ctx context.Context, base stock.Item, bs []bucketCheck, resetStock bool, available, fence int64) error {
	shares := stock.Split(available, len(bs))
	for b := range bs {
		it := base
		it.Bucket = b
		// The script sets stock to its DB stock argument minus what is in
		// flight in the bucket now; from the check's in flight, that is the
		// share (or the stock as read: unchanged) less what was reserved
		// since.
		want := bs[b].cur
		if resetStock {
			want = shares[b]
		}
		fix := bs[b].want
		fix.Stock, fix.Fence = want+bs[b].rep.InFlight, fence
		if _, err := r.deps.Stock.Fix(ctx, it, fix); err != nil {
			return err
		}
	}
	return nil
}

// finishTransfers completes the transfers a mover left (it died between
// take and give, or before dropping the record): given to their target, or
// cancelled when the target lost its stock key (the fix then resets the
// stock, and the shares hold those units).
func (r *Reconciler) finishTransfers(ctx context.Context, base stock.Item, buckets int, fence int64) error {
	transfers, err := r.deps.Stock.Transfers(ctx, base, buckets)
	if err != nil {
		return err
	}
	for _, t := range transfers {
		err := r.deps.Stock.Finish(ctx, base, t, fence)
		if errors.Is(err, stock.ErrNoStockKey) {
			err = r.deps.Stock.Forget(ctx, base, t, fence)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// restoreBucketDedup is restoreDedup for a bucketed item: each decided
// request's records go to its user's bucket.
func (r *Reconciler) restoreBucketDedup(ctx context.Context, base stock.Item, buckets int, rep *ItemReport) error {
	decided, err := r.deps.Orders.ProcessedSince(ctx, base.ActivityID, base.ItemID, stock.DedupLifetime)
	if err != nil {
		return err
	}
	recs := make([][]stock.Decided, buckets)
	for _, d := range decided {
		b := stock.BucketOf(d.UserID, buckets)
		ev := event.OrderRequested{RequestID: d.RequestID, OrderNo: d.OrderNo, UserID: d.UserID, ActivityID: d.ActivityID,
			ItemID: d.ItemID, Quantity: d.Quantity, ReservedAt: d.ReservedAt.UTC(), Bucket: b}
		recs[b] = append(recs[b], stock.Decided{RequestID: d.RequestID, OrderNo: d.OrderNo, Event: ev.Marshal(),
			Fingerprint: stock.Fingerprint(d.UserID, d.ActivityID, d.ItemID, d.Quantity)})
	}
	for b := range buckets {
		it := base
		it.Bucket = b
		n, err := r.deps.Stock.RestoreDedup(ctx, it, recs[b], 0)
		rep.RestoredDedup += n
		if err != nil {
			return err
		}
	}
	return nil
}
