package stock

// Bucketed stock: one hot item's stock split over B buckets, each under its
// own hash tag, so B Redis shards run its scripts instead of one
// (docs/stores.md "Bucketed stock"). A user always lands in the same
// bucket, FNV-1a(userId) mod B, so their limit marker and dedup records are
// in one place and the per-user limit stays as exact as with one bucket; the
// scripts do not change, only the keys they are given. B = 1 is the plain
// layout: bucket 0's keys are the item's own.
//
// Units stranded in some buckets while another is empty are moved by a
// two-step transfer (take on the source, give on the target), each step
// idempotent under the transfer's id, so a mover that dies between them
// finishes on its next pass (Move). Every step is fenced by the item's
// bucket lock (bucketlock.go), which keeps the mover and the reconciler's fix
// off one item's buckets at once.

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxBuckets bounds an item's buckets (the admin API refuses more).
const MaxBuckets = 64

// MoveHold is how long units moved into a bucket stay there before the
// mover may take them on to another empty bucket.
const MoveHold = time.Second

var (
	//go:embed take.lua
	takeLua string
	//go:embed give.lua
	giveLua string

	takeScript = redis.NewScript(takeLua)
	giveScript = redis.NewScript(giveLua)
)

// BucketOf is the bucket of a user among buckets: FNV-1a (64-bit) of the
// userId's decimal digits, mod buckets; 0 when buckets ≤ 1. It must never
// change: the buckets of live reservations and orders are derived from it.
func BucketOf(userID int64, buckets int) int {
	if buckets <= 1 {
		return 0
	}
	var buf [20]byte
	h := uint64(14695981039346656037)
	for _, c := range strconv.AppendInt(buf[:0], userID, 10) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return int(h % uint64(buckets))
}

// ForUser is the item's bucket that serves userID.
func (it Item) ForUser(userID int64, buckets int) Item {
	it.Bucket = BucketOf(userID, buckets)
	return it
}

// Base is the item itself (bucket 0).
func (it Item) Base() Item {
	it.Bucket = 0
	return it
}

// Split is how preheat divides stock over buckets: ⌊S/B⌋ each, one more for
// the first S mod B.
func Split(stock int64, buckets int) []int64 {
	buckets = max(buckets, 1)
	out := make([]int64, buckets)
	for b := range out {
		out[b] = stock / int64(buckets)
		if int64(b) < stock%int64(buckets) {
			out[b]++
		}
	}
	return out
}

// ValidBuckets reports whether b is an acceptable bucket count.
func ValidBuckets(b int) bool { return b >= 1 && b <= MaxBuckets }

// Buckets reads an item's bucket count from its sale (bucket 0's sale hash
// carries "buckets" when there are more than one). ok is false when the item
// is not preheated (no sale).
func (s *Store) Buckets(ctx context.Context, it Item) (n int, ok bool, err error) {
	v, err := s.rdb.HMGet(ctx, s.keys(it.Base()).Sale, "ends", "buckets").Result()
	if err != nil {
		return 0, false, fmt.Errorf("reading buckets of %s: %w", it, err)
	}
	if v[0] == nil {
		return 1, false, nil
	}
	if v[1] == nil {
		return 1, true, nil
	}
	n, err = strconv.Atoi(fmt.Sprint(v[1]))
	if err != nil || !ValidBuckets(n) {
		return 0, false, fmt.Errorf("item %s has a bad bucket count %v", it, v[1])
	}
	return n, true, nil
}

// Transfer is a move of units between two buckets of an item, taken from
// From and not yet known to be given (its record still in From's transfers).
type Transfer struct {
	ID    string
	From  int
	To    int
	Units int64
	// Given: the target has the units; only the record is left to drop.
	Given bool
}

// Transfers lists the transfer records of every bucket of an item.
func (s *Store) Transfers(ctx context.Context, it Item, buckets int) ([]Transfer, error) {
	var out []Transfer
	for b := range max(buckets, 1) {
		src := it
		src.Bucket = b
		recs, err := s.rdb.HGetAll(ctx, s.keys(src).Transfers).Result()
		if err != nil {
			return nil, fmt.Errorf("reading transfers of %s bucket %d: %w", it, b, err)
		}
		for id, v := range recs {
			to, units, ok := strings.Cut(v, ":")
			t, err1 := strconv.Atoi(to)
			n, err2 := strconv.ParseInt(units, 10, 64)
			if !ok || err1 != nil || err2 != nil || t < 0 || t >= buckets {
				return nil, fmt.Errorf("transfer %s of %s bucket %d is unreadable: %q", id, it, b, v)
			}
			dst := it
			dst.Bucket = t
			seen, err := s.rdb.Exists(ctx, s.keys(dst).Given(id)).Result()
			if err != nil {
				return nil, fmt.Errorf("reading transfer %s of %s: %w", id, it, err)
			}
			out = append(out, Transfer{ID: id, From: b, To: t, Units: n, Given: seen == 1})
		}
	}
	return out, nil
}

// BucketStocks reads each bucket's stock; a missing or unreadable key is nil.
func (s *Store) BucketStocks(ctx context.Context, it Item, buckets int) ([]*int64, error) {
	buckets = max(buckets, 1)
	cmds := make([]*redis.StringCmd, buckets)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := range cmds {
			bi := it
			bi.Bucket = b
			cmds[b] = p.Get(ctx, s.keys(bi).Stock)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading bucket stocks of %s: %w", it, err)
	}
	out := make([]*int64, buckets)
	for b, c := range cmds {
		if n, err := c.Int64(); err == nil {
			out[b] = &n
		}
	}
	return out, nil
}

// ErrNoStockKey: a transfer's target bucket has no stock key (lost or
// expired); the transfer stays recorded until the reconciler restores it.
var ErrNoStockKey = errors.New("target bucket has no stock key")

// Finish completes a recorded transfer: gives the units to its target
// (unless given already) and drops the record. fence is the caller's
// fencing token of the item's bucket lock (LockBuckets), as for every
// transfer step.
func (s *Store) Finish(ctx context.Context, it Item, t Transfer, fence int64) error {
	return s.settle(ctx, it, t, fence, "give")
}

// Forget forgets a transfer whose units the reconciler's fix has accounted
// for anew: its give can no longer run, and its record is dropped.
func (s *Store) Forget(ctx context.Context, it Item, t Transfer, fence int64) error {
	return s.settle(ctx, it, t, fence, "cancel")
}

func (s *Store) settle(ctx context.Context, it Item, t Transfer, fence int64, mode string) error {
	if err := checkFence(fence); err != nil {
		return err
	}
	src, dst := it, it
	src.Bucket, dst.Bucket = t.From, t.To
	dk, sk := s.keys(dst), s.keys(src)
	out, err := giveScript.Run(ctx, s.rdb, []string{dk.Stock, dk.Given(t.ID), dk.Hold(), dk.Fence()},
		t.Units, int64(FateLifetime/time.Second), MoveHold.Milliseconds(), fence, mode).Text()
	switch {
	case err != nil:
		return fmt.Errorf("%s of transfer %s of %s: %w", mode, t.ID, it, err)
	case out == "STALE":
		return staleErr(mode+" of transfer "+t.ID, it, t.To, fence)
	case out != "GIVEN":
		return fmt.Errorf("giving transfer %s of %s to bucket %d: %w", t.ID, it, t.To, ErrNoStockKey)
	}
	n, err := dropScript.Run(ctx, s.rdb, []string{sk.Transfers, sk.Fence()}, t.ID, fence).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("dropping transfer %s of %s: %w", t.ID, it, err)
	case n < 0:
		return staleErr("dropping transfer "+t.ID, it, t.From, fence)
	}
	return nil
}

// Take is a transfer's first step: the units leave the source bucket and
// are recorded there under the transfer's id (taking an id twice takes
// once). It reports false when the source no longer holds them.
func (s *Store) Take(ctx context.Context, it Item, t Transfer, fence int64) (bool, error) {
	if err := checkFence(fence); err != nil {
		return false, err
	}
	src := it
	src.Bucket = t.From
	k := s.keys(src)
	took, err := takeScript.Run(ctx, s.rdb, []string{k.Stock, k.Transfers, k.Fence()}, t.ID, t.To, t.Units, fence).Int64()
	switch {
	case err != nil:
		return false, fmt.Errorf("taking transfer %s of %s: %w", t.ID, it, err)
	case took < 0:
		return false, staleErr("taking transfer "+t.ID, it, t.From, fence)
	}
	return took == 1, nil
}

// Move is one mover step for an item of buckets buckets: first it finishes
// the transfers a previous mover left, then, if a bucket is empty while
// another holds units (and did not just receive them, MoveHold), it moves
// half of the richest such bucket's units (at least one) there. It returns
// the units moved by the new transfer. The caller holds the item's bucket
// lock (WithBuckets) and passes its fencing token.
func (s *Store) Move(ctx context.Context, it Item, buckets int, fence int64) (int64, error) {
	if buckets <= 1 {
		return 0, nil
	}
	pending, err := s.Transfers(ctx, it, buckets)
	if err != nil {
		return 0, err
	}
	for _, t := range pending {
		if err := s.Finish(ctx, it, t, fence); errors.Is(err, ErrNoStockKey) {
			return 0, nil // the target's keys are lost: left to the reconciler's fix
		} else if err != nil {
			return 0, err
		}
	}
	from, to, units, err := s.plan(ctx, it, buckets)
	if err != nil || units == 0 {
		return 0, err
	}
	t := Transfer{ID: newTransferID(), From: from, To: to, Units: units}
	if took, err := s.Take(ctx, it, t, fence); err != nil || !took {
		return 0, err // not taken: sold meanwhile, next pass
	}
	if err := s.Finish(ctx, it, t, fence); err != nil {
		return 0, err
	}
	return t.Units, nil
}

// plan picks a move: the first empty bucket, and the richest bucket not
// held; units 0 when there is nothing to move (or a bucket has no stock
// key: not preheated, or lost — the reconciler's business).
func (s *Store) plan(ctx context.Context, it Item, buckets int) (from, to int, units int64, err error) {
	stocks := make([]*redis.StringCmd, buckets)
	held := make([]*redis.IntCmd, buckets)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := range buckets {
			bi := it
			bi.Bucket = b
			k := s.keys(bi)
			stocks[b] = p.Get(ctx, k.Stock)
			held[b] = p.Exists(ctx, k.Hold())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, 0, fmt.Errorf("reading buckets of %s: %w", it, err)
	}
	from, to = -1, -1
	var most int64
	for b := range buckets {
		n, err := stocks[b].Int64()
		if err != nil {
			return 0, 0, 0, nil
		}
		if n <= 0 && to < 0 {
			to = b
		}
		if n > most && held[b].Val() == 0 {
			from, most = b, n
		}
	}
	if to < 0 || from < 0 {
		return 0, 0, 0, nil
	}
	return from, to, max(most/2, 1), nil
}

func newTransferID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// SnapshotBuckets is Snapshot over an item's buckets: the stocks summed (nil
// if a bucket has none), the journals together. The buckets are read one
// after the other, not at one instant; with one bucket it is Snapshot.
func (s *Store) SnapshotBuckets(ctx context.Context, it Item, buckets int) (Snapshot, error) {
	if buckets <= 1 {
		return s.Snapshot(ctx, it)
	}
	var out Snapshot
	var total int64
	whole := true
	for b := range buckets {
		bi := it
		bi.Bucket = b
		sn, err := s.Snapshot(ctx, bi)
		if err != nil {
			return Snapshot{}, err
		}
		if sn.Stock == nil {
			whole = false
		} else {
			total += *sn.Stock
		}
		out.Journal = append(out.Journal, sn.Journal...)
		out.Unreadable += sn.Unreadable
	}
	if whole {
		out.Stock = &total
	}
	return out, nil
}

// NeedsMove tells, without a lock, whether Move has work on the item: a
// transfer record to finish, or a move to make.
func (s *Store) NeedsMove(ctx context.Context, it Item, buckets int) (bool, error) {
	if buckets <= 1 {
		return false, nil
	}
	for b := range buckets {
		bi := it
		bi.Bucket = b
		n, err := s.rdb.HLen(ctx, s.keys(bi).Transfers).Result()
		if err != nil {
			return false, fmt.Errorf("reading transfers of %s: %w", it, err)
		}
		if n > 0 {
			return true, nil
		}
	}
	_, _, units, err := s.plan(ctx, it, buckets)
	return units > 0, err
}
