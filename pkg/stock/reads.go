package stock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The reads the other components need of an item's Redis side: redrive and
// the reconciler read the journal, locate a request's traces, the invariant
// checker the markers, the gateway's readiness probe pings.

// JournalIDs lists the requestIds an item's journal holds.
func (s *Store) JournalIDs(ctx context.Context, it Item) ([]string, error) {
	rids, err := s.rdb.HKeys(ctx, s.keys(it).Journal).Result()
	if err != nil {
		return nil, fmt.Errorf("reading journal of %s bucket %d: %w", it, it.Bucket, err)
	}
	return rids, nil
}

// Journal reads an item's journal, requestId → entry, a few hundred
// entries a call (HSCAN), so a long journal never blocks Redis.
func (s *Store) Journal(ctx context.Context, it Item) (map[string]string, error) {
	out := map[string]string{}
	err := s.JournalPages(ctx, it, func(page map[string]string) error {
		maps.Copy(out, page)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// JournalPages calls fn with an item's journal a page (HSCAN's, about 500
// entries) at a time, so neither Redis nor the caller ever holds a long
// journal at once. As with any HSCAN, an entry the journal holds from start
// to end comes at least once and may come twice; fn's error ends the scan.
func (s *Store) JournalPages(ctx context.Context, it Item, fn func(page map[string]string) error) error {
	key := s.keys(it).Journal
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, key, cursor, "", 500).Result()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading journal: %w", err)
		}
		if len(kv) > 0 {
			page := make(map[string]string, len(kv)/2)
			for i := 0; i+1 < len(kv); i += 2 {
				page[kv[i]] = kv[i+1]
			}
			if err := fn(page); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// DedupRecord is a request's dedup record as the reserve script wrote it.
type DedupRecord struct {
	Key         string // the record's key, for an operator to read it
	OrderNo     string
	Remaining   string
	TraceParent string
	Event       string
	// Published: Kafka acknowledged the reservation's event (the
	// gateway's mark, or the redrive's); Claimed: a worker claimed it.
	Published, Claimed bool
}

// Traces is what one item's (bucket's) keys hold about a request.
type Traces struct {
	Item
	Dedup     *DedupRecord // nil: none
	Journal   string       // the journal entry ("" with Journaled false: none)
	Journaled bool
}

// Traces reads a request's dedup record and journal entry on each of items
// in one pipeline (the on-call's "where is this request?").
func (s *Store) Traces(ctx context.Context, items []Item, requestID string) ([]Traces, error) {
	type cmds struct {
		dedup   *redis.MapStringStringCmd
		journal *redis.StringCmd
	}
	got := make([]cmds, len(items))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			k := s.keys(it)
			got[i] = cmds{dedup: p.HGetAll(ctx, k.Req(requestID)), journal: p.HGet(ctx, k.Journal, requestID)}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading redis: %w", err)
	}
	for _, c := range got {
		for _, err := range []error{c.dedup.Err(), c.journal.Err()} {
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("reading redis: %w", err)
			}
		}
	}
	out := make([]Traces, len(items))
	for i, it := range items {
		out[i].Item = it
		if d := got[i].dedup.Val(); len(d) > 0 {
			out[i].Dedup = &DedupRecord{Key: s.keys(it).Req(requestID), OrderNo: d["orderNo"], Remaining: d["remaining"],
				TraceParent: d["tp"], Event: d["event"], Published: d["published"] == "1", Claimed: d["claimed"] != ""}
		}
		if j, err := got[i].journal.Result(); err == nil {
			out[i].Journal, out[i].Journaled = j, true
		}
	}
	return out, nil
}

// Fate is a reservation's release guard: "claimed:<orderNo>",
// "released:<orderNo>", or "" when it has none.
func (s *Store) Fate(ctx context.Context, it Item, orderNo string) (string, error) {
	fate, err := s.rdb.Get(ctx, s.keys(it).Fate(orderNo)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("reading redis: %w", err)
	}
	return fate, nil
}

// MarkerOwner is the requestId the user's limit marker names ("" when the
// user holds none).
func (s *Store) MarkerOwner(ctx context.Context, it Item, userID int64) (string, error) {
	owner, err := s.rdb.Get(ctx, s.keys(it).Limit(userID)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("reading limit marker: %w", err)
	}
	return owner, nil
}

// SaleWindow is the window the item's (bucket's) sale hash holds, the one
// the reserve script sells by; ok is false when there is none.
func (s *Store) SaleWindow(ctx context.Context, it Item) (starts, ends time.Time, ok bool, err error) {
	v, err := s.rdb.HMGet(ctx, s.keys(it).Sale, "starts", "ends").Result()
	if err != nil {
		return time.Time{}, time.Time{}, false, fmt.Errorf("reading the sale of %s: %w", it, err)
	}
	a, aok := v[0].(string)
	b, bok := v[1].(string)
	if !aok || !bok {
		return time.Time{}, time.Time{}, false, nil
	}
	from, err1 := strconv.ParseInt(a, 10, 64)
	to, err2 := strconv.ParseInt(b, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return time.Time{}, time.Time{}, false, fmt.Errorf("reading the sale of %s: %w", it, err)
	}
	return time.UnixMilli(from).UTC(), time.UnixMilli(to).UTC(), true, nil
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }

// JournalLen counts the journal entries of the items (buckets), in one
// pipeline: the reservations not yet decided by a worker.
func (s *Store) JournalLen(ctx context.Context, items ...Item) (int64, error) {
	cmds := make([]*redis.IntCmd, len(items))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			cmds[i] = p.HLen(ctx, s.keys(it).Journal)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("reading journals: %w", err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

// MarkerOwners reads the limit markers of the given users in one item
// (bucket), 500 a round trip: user → the requestId holding it (users
// holding none are absent). Reading the users' keys directly costs what
// they are, where a scan walks the whole keyspace.
func (s *Store) MarkerOwners(ctx context.Context, it Item, users []int64) (map[int64]string, error) {
	k := s.keys(it)
	out := map[int64]string{}
	for start := 0; start < len(users); start += 500 {
		batch := users[start:min(start+500, len(users))]
		names := make([]string, len(batch))
		for i, u := range batch {
			names[i] = k.Limit(u)
		}
		vals, err := s.rdb.MGet(ctx, names...).Result()
		if err != nil {
			return nil, fmt.Errorf("reading limit markers: %w", err)
		}
		for i, v := range vals {
			if str, ok := v.(string); ok {
				out[batch[i]] = str
			}
		}
	}
	return out, nil
}

// ItemMarkers is every limit marker of the item (bucket), user → the
// requestId it names, found by a SCAN whatever the marker index says: its
// cost is every key Redis holds, so it is for checkers on a Redis of their
// own (the tests'), not for the order path.
func (s *Store) ItemMarkers(ctx context.Context, it Item) (map[int64]string, error) {
	k := s.keys(it)
	head := k.Prefix + "limit:" + k.Tag + ":"
	var users []int64
	var mu sync.Mutex
	err := s.scanAll(ctx, k.LimitPattern(), 1000, func(key string) {
		if u, err := strconv.ParseInt(strings.TrimPrefix(key, head), 10, 64); err == nil {
			mu.Lock()
			users = append(users, u)
			mu.Unlock()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("scanning the limit markers of %s: %w", it, err)
	}
	slices.Sort(users)
	return s.MarkerOwners(ctx, it, slices.Compact(users))
}
