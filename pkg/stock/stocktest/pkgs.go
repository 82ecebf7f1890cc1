package stocktest

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/stock"
)

// MarkerTTL reads how long the user's limit marker lives (Redis TTL: < 0 without one).
func MarkerTTL(tb TB, r Redis, it stock.Item, userID int64) time.Duration {
	tb.Helper()
	ttl, err := r.Client.TTL(context.Background(), KeysOf(r, it).Limit(userID)).Result()
	if err != nil {
		tb.Fatalf("reading the TTL of the marker of user %d: %v", userID, err)
	}
	return ttl
}

// MarkerIndexTTL reads how long the item's (bucket's) marker index lives (Redis TTL).
func MarkerIndexTTL(tb TB, r Redis, it stock.Item) time.Duration {
	tb.Helper()
	ttl, err := r.Client.TTL(context.Background(), KeysOf(r, it).MarkerIndex()).Result()
	if err != nil {
		tb.Fatalf("reading the TTL of the marker index of %s: %v", it, err)
	}
	return ttl
}

// AddToMarkerIndex puts the user in the item's (bucket's) marker index, marker or not.
func AddToMarkerIndex(tb TB, r Redis, it stock.Item, userID int64) {
	tb.Helper()
	if err := r.Client.SAdd(context.Background(), KeysOf(r, it).MarkerIndex(), userID).Err(); err != nil {
		tb.Fatalf("adding user %d to the marker index of %s: %v", userID, it, err)
	}
}

// SetMarkers puts a limit marker naming owner for each user, pipelined, outside the index.
func SetMarkers(tb TB, r Redis, it stock.Item, owner string, userIDs ...int64) {
	tb.Helper()
	ctx := context.Background()
	k := KeysOf(r, it)
	_, err := r.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, u := range userIDs {
			p.Set(ctx, k.Limit(u), owner, 0)
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("setting %d markers of %s: %v", len(userIDs), it, err)
	}
}

// HasRequest reads whether the item's dedup record of the requestId exists.
func HasRequest(tb TB, r Redis, it stock.Item, requestID string) bool {
	tb.Helper()
	n, err := r.Client.Exists(context.Background(), KeysOf(r, it).Req(requestID)).Result()
	if err != nil {
		tb.Fatalf("reading the dedup record of %s: %v", requestID, err)
	}
	return n == 1
}

// SetJournalEntry puts entry as the request's journal entry, as a corrupt write would.
func SetJournalEntry(tb TB, r Redis, it stock.Item, requestID, entry string) {
	tb.Helper()
	if err := r.Client.HSet(context.Background(), KeysOf(r, it).Journal, requestID, entry).Err(); err != nil {
		tb.Fatalf("writing the journal entry of %s: %v", requestID, err)
	}
}

// FlushScripts drops the script cache of r's Redis (SCRIPT FLUSH), as a restart would.
func FlushScripts(tb TB, r Redis) {
	tb.Helper()
	if err := r.Client.ScriptFlush(context.Background()).Err(); err != nil {
		tb.Fatalf("flushing the scripts: %v", err)
	}
}

// ReserveCalls counts, at a store's Redis client, the reserve script's
// calls for one request, by the orderNo each attempt of it (first or
// retry) made up: one orderNo is one HTTP request.
type ReserveCalls struct {
	requestID, fingerprint string
	mu                     sync.Mutex
	calls                  map[string]int
	order                  []string // orderNos by first call
}

// CountReserves reads, from now on, the reserve calls of the request sent on r's client.
func CountReserves(tb TB, r Redis, requestID, fingerprint string) *ReserveCalls {
	tb.Helper()
	c := &ReserveCalls{requestID: requestID, fingerprint: fingerprint, calls: map[string]int{}}
	r.Client.AddHook(seeHook(c.see))
	return c
}

// Snapshot is the calls of each attempt, in the order they first called.
func (c *ReserveCalls) Snapshot() (order []string, calls map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.order...), maps.Clone(c.calls)
}

// see counts a reserve call: EVALSHA|EVAL script <n> <n keys> requestId
// fingerprint orderNo ... (reserve.lua's ARGV).
func (c *ReserveCalls) see(cmd redis.Cmder) {
	a := cmd.Args()
	if n := cmd.Name(); (n != "evalsha" && n != "eval") || len(a) < 3 {
		return
	}
	nkeys, err := strconv.Atoi(fmt.Sprint(a[2]))
	base := 3 + nkeys
	if err != nil || len(a) < base+3 || fmt.Sprint(a[base]) != c.requestID || fmt.Sprint(a[base+1]) != c.fingerprint {
		return
	}
	orderNo := fmt.Sprint(a[base+2])
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls[orderNo] == 0 {
		c.order = append(c.order, orderNo)
	}
	c.calls[orderNo]++
}

// ScriptCalls counts every script call (EVALSHA, EVAL) a store's client
// sends: a test proves with it that a path ran no script.
type ScriptCalls struct{ n atomic.Int64 }

// CountScripts counts, from now on, the script calls sent on r's client.
func CountScripts(r Redis) *ScriptCalls {
	c := &ScriptCalls{}
	r.Client.AddHook(seeHook(c.see))
	return c
}

// N is how many script calls were sent so far.
func (c *ScriptCalls) N() int64 { return c.n.Load() }

func (c *ScriptCalls) see(cmd redis.Cmder) {
	if n := cmd.Name(); n == "evalsha" || n == "eval" {
		c.n.Add(1)
	}
}

// seeHook is a redis.Hook that shows every command a client sends, alone
// or in a pipeline, to the func before sending it on.
type seeHook func(redis.Cmder)

func (h seeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h seeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h(cmd); return next(ctx, cmd) }
}

func (h seeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h(cmd)
		}
		return next(ctx, cmds)
	}
}
