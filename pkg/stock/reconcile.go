package stock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed reconcile.lua
	reconcileLua    string
	reconcileScript = redis.NewScript(reconcileLua)
)

// Pending is a compensation Postgres owes that may not have been released
// in Redis yet.
type Pending struct {
	Ref
	Quantity int
}

// Expected is what Postgres says an item (one bucket of it) should hold in
// Redis: the input of Reconcile.
type Expected struct {
	// Stock is the DB stock the check compares with: Redis stock should be
	// Stock minus what is in flight, and a fix sets it so.
	Stock            int64
	StartsAt, EndsAt time.Time
	Cap              int
	// Created maps the journaled requestIds created as orders to their
	// orderNo: their entries are no longer in flight.
	Created map[string]string
	// Pending are the compensations not marked applied.
	Pending []Pending
	// Users are the users whose limit marker is checked (sorted, unique);
	// Live maps those with a live order to its requestId.
	Users []int64
	Live  map[int64]string
	// Fence, when > 0, is the bucket lock's fencing token (a bucketed
	// item's fix): the script refuses it if the bucket's fence is newer.
	Fence int64
	// Buckets, when > 1, is the sale's bucket count a fix writes.
	Buckets int
	// Scanned: Users include every marker a keyspace scan found, so a fix
	// marks the marker index complete.
	Scanned bool
}

// Observed is what Reconcile read in Redis, against Expected.
type Observed struct {
	// StockKey is "ok", "missing" or "invalid" (not a number); Stock is
	// the stock as read (0 unless ok).
	StockKey string
	Stock    int64
	// InFlight is the quantity journaled and not created, plus compensated
	// and not released; Entries and Compensations count them.
	InFlight      int64
	Entries       int
	Compensations int
	// Sale is "ok", "missing" or "differs" (window or cap).
	Sale string
	// Missing, Wrong and Extra are users of Expected.Users whose marker is
	// missing, names another request, or is held with no live order.
	Missing, Wrong, Extra []int64
	// Unreadable counts journal entries that are not an event with an
	// orderNo and a quantity.
	Unreadable int
}

// Check compares an item's (bucket's) Redis side with e in one script, so
// the stock, journal, fates and markers are read at one instant. The caller
// holds the item's stock row meanwhile, so no order of it commits.
func (s *Store) Check(ctx context.Context, it Item, e Expected) (Observed, error) {
	return s.reconcile(ctx, it, e, "check")
}

// Fix is Check that then makes Redis agree with Postgres (reconcile.lua):
// stock = e.Stock − in flight, the sale window and cap, the markers of live
// orders, no marker nobody owns, and a marker index that lists them. A fix
// whose fencing token a newer bucket lock holder outdated changes nothing
// and fails with lock.ErrStaleFence.
func (s *Store) Fix(ctx context.Context, it Item, e Expected) (Observed, error) {
	return s.reconcile(ctx, it, e, "fix")
}

func (s *Store) reconcile(ctx context.Context, it Item, e Expected, mode string) (Observed, error) {
	k := s.keys(it)
	keys := make([]string, 0, 5+len(e.Pending)+len(e.Users))
	keys = append(keys, k.Stock, k.Sale, k.Journal, k.Fence(), k.MarkerIndex())
	fence, buckets, scanned := any(""), any(""), ""
	if e.Fence > 0 {
		fence = e.Fence
	}
	if e.Buckets > 1 {
		buckets = e.Buckets
	}
	if e.Scanned {
		scanned = "1"
	}
	args := make([]any, 0, 13+2*len(e.Created)+3*len(e.Pending)+2*len(e.Users))
	args = append(args, mode, e.Stock, e.StartsAt.UnixMilli(), e.EndsAt.UnixMilli(), e.Cap,
		e.EndsAt.Add(StockGrace).Unix(), e.EndsAt.Add(MarkerLife).UnixMilli()/1000,
		len(e.Created), len(e.Pending), len(e.Users), fence, buckets, scanned)
	for rid, ono := range e.Created {
		args = append(args, rid, ono)
	}
	for _, c := range e.Pending {
		keys = append(keys, k.Fate(c.OrderNo))
		args = append(args, c.RequestID, c.OrderNo, c.Quantity)
	}
	for _, u := range e.Users {
		keys = append(keys, k.Limit(u))
		args = append(args, e.Live[u], u)
	}
	res, err := reconcileScript.Run(ctx, s.rdb, keys, args...).Result()
	if err != nil && mode == "fix" {
		return Observed{}, fmt.Errorf("fixing %s bucket %d: %w", it, it.Bucket, err)
	}
	if err != nil {
		return Observed{}, fmt.Errorf("running reconcile script on %s bucket %d: %w", it, it.Bucket, err)
	}
	if res == "STALE" {
		return Observed{}, staleErr("fixing", it, it.Bucket, e.Fence)
	}
	out, ok := res.([]any)
	if !ok || len(out) != 10 {
		return Observed{}, fmt.Errorf("reconcile script answered %v", res)
	}
	num := func(i int) int64 { n, _ := out[i].(int64); return n }
	pick := func(i int) []int64 {
		idx, _ := out[i].([]any)
		us := []int64{}
		for _, v := range idx {
			if j, ok := v.(int64); ok && j >= 1 && int(j) <= len(e.Users) {
				us = append(us, e.Users[j-1])
			}
		}
		return us
	}
	o := Observed{StockKey: "missing", Stock: num(1), InFlight: num(2), Entries: int(num(3)), Compensations: int(num(4)),
		Sale: fmt.Sprint(out[5]), Missing: pick(6), Wrong: pick(7), Extra: pick(8), Unreadable: int(num(9))}
	switch num(0) {
	case 1:
		o.StockKey = "ok"
	case 2:
		o.StockKey = "invalid"
	}
	return o, nil
}

// ScanMarkers lists the users holding a limit marker, per item (bucket), by
// a SCAN of the whole keyspace (every primary of a cluster): its cost is
// every key Redis holds, so it is for when a marker index does not vouch
// for itself (Markers).
func (s *Store) ScanMarkers(ctx context.Context) (map[Item][]int64, error) {
	head := s.prefix + "limit:"
	pattern := head + "{a*"
	out := map[Item][]int64{}
	var mu sync.Mutex
	add := func(key string) {
		it, user, ok := parseMarker(strings.TrimPrefix(key, head))
		if !ok {
			return
		}
		mu.Lock()
		out[it] = append(out[it], user)
		mu.Unlock()
	}
	// A large COUNT: few round trips, each still about a millisecond of
	// Redis time.
	err := s.scanAll(ctx, pattern, 10000, add)
	if err != nil {
		return nil, fmt.Errorf("scanning limit markers: %w", err)
	}
	return out, nil
}

// parseMarker reads "{a<activity>:i<item>}:<user>" or, in bucket b > 0,
// "{a<activity>:i<item>:b<b>}:<user>".
func parseMarker(s string) (Item, int64, bool) {
	tag, user, ok := strings.Cut(s, "}:")
	if !ok || !strings.HasPrefix(tag, "{a") {
		return Item{}, 0, false
	}
	act, item, ok := strings.Cut(tag[2:], ":i")
	if !ok {
		return Item{}, 0, false
	}
	bucket := 0
	if rest, bs, isBucket := strings.Cut(item, ":b"); isBucket {
		b, err := strconv.Atoi(bs)
		if err != nil || b <= 0 {
			return Item{}, 0, false
		}
		item, bucket = rest, b
	}
	a, err1 := strconv.ParseInt(act, 10, 64)
	i, err2 := strconv.ParseInt(item, 10, 64)
	u, err3 := strconv.ParseInt(user, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Item{}, 0, false
	}
	return Item{ActivityID: a, ItemID: i, Bucket: bucket}, u, true
}

// scanAll calls each with every key matching pattern, SCAN by SCAN with
// count, on every primary of a Cluster (concurrently: each must be safe for
// that) or on the one server.
func (s *Store) scanAll(ctx context.Context, pattern string, count int64, each func(key string)) error {
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, count).Iterator()
		for iter.Next(ctx) {
			each(iter.Val())
		}
		return iter.Err()
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, s.rdb)
}
