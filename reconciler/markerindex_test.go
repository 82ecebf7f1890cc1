package reconciler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/reconciler"
)

// TestMarkersOfAnIncompleteIndex: an item whose marker index does not vouch
// for every marker (markers an older binary set, or an index Redis lost) is
// read by a keyspace scan, so a marker outside the index is still found as
// extra; the fix removes it and completes the index, and the next pass reads
// the index alone.
func TestMarkersOfAnIncompleteIndex(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	ctx := context.Background()
	k := stocktest.KeysOf(e.st, e.it)
	c := e.rdb.Client
	e.ack(t, e.decide(t, e.reserve(t, e.it, "a", 1, 1))...)
	// As an older binary leaves the item: markers, and no index.
	if err := c.Del(ctx, k.MarkerIndex()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, k.Limit(99), "nobody", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	r := e.check(t, e.it)
	if !slices.Equal(r.ExtraMarkers, []int64{99}) || len(r.MissingMarkers)+len(r.WrongMarkers) != 0 || r.MarkerIndex != "incomplete" {
		t.Fatalf("incomplete index: extra %v missing %v wrong %v index %q; want extra [99], incomplete",
			r.ExtraMarkers, r.MissingMarkers, r.WrongMarkers, r.MarkerIndex)
	}
	res, err := e.fixer.RunOnce(ctx)
	if err != nil || res.ExitCode() != reconciler.ExitClean {
		t.Fatalf("fix: exit %d, %v", res.ExitCode(), err)
	}
	var out strings.Builder
	if err := res.WriteText(&out); err != nil || !strings.Contains(out.String(), "activity 7 item 1: marker index incomplete") {
		t.Errorf("the fix's report does not say the index was incomplete (%v):\n%s", err, out.String())
	}
	if c.Exists(ctx, k.Limit(99)).Val() != 0 {
		t.Error("extra marker survived the fix")
	}
	users, complete, err := e.st.Markers(ctx, e.it)
	if err != nil || !complete || !slices.Equal(users, []int64{1}) {
		t.Errorf("index after the fix: %v complete %v (%v); want [1] complete", users, complete, err)
	}
	if ttl := c.TTL(ctx, k.MarkerIndex()).Val(); ttl <= time.Hour {
		t.Errorf("index TTL after the fix %s; want the sale end + a day", ttl)
	}
	if r := e.check(t, e.it); r.Drifted() || r.MarkerIndex != "ok" {
		t.Errorf("after the fix: %+v", r)
	}

	// A stale member (its marker gone outside the scripts) is no drift, and
	// a fix drops it.
	if err := c.SAdd(ctx, k.MarkerIndex(), 42).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, k.Stock, 3, 0).Err(); err != nil { // some drift, so the fix runs
		t.Fatal(err)
	}
	if r := e.check(t, e.it); len(r.MissingMarkers)+len(r.ExtraMarkers)+len(r.WrongMarkers) != 0 {
		t.Errorf("a stale member reported as marker drift: %+v", r)
	}
	if res, err := e.fixer.RunOnce(ctx); err != nil || res.ExitCode() != reconciler.ExitClean {
		t.Fatalf("second fix: exit %d, %v", res.ExitCode(), err)
	}
	if users, _, _ := e.st.Markers(ctx, e.it); !slices.Equal(users, []int64{1}) {
		t.Errorf("index after the second fix: %v; want [1]", users)
	}
}

// commandCounter counts the commands a client sends, by name.
type commandCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandCounter) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		c.n[strings.ToLower(cmd.Name())]++
	}
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.add(cmd); return next(ctx, cmd) }
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.add(cmds...); return next(ctx, cmds) }
}

// TestPassReadsOnlyTheItemsMarkers: with 50k unrelated keys beside the sale
// (dedup records, other sales' markers: what earlier sales leave), a pass
// reads each item's marker index and never scans the keyspace, and still
// finds a missing marker.
func TestPassReadsOnlyTheItemsMarkers(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	ctx := context.Background()
	c := e.rdb.Client
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 50000 {
			p.Set(ctx, fmt.Sprintf("%slimit:{a9:i%d}:%d", e.rdb.Prefix, i%7, i), "old", time.Hour)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.ack(t, e.decide(t, e.reserve(t, e.it, "a", 1, 1), e.reserve(t, e.it, "b", 2, 1))...)
	if err := c.Del(ctx, stocktest.KeysOf(e.st, e.it).Limit(2)).Err(); err != nil {
		t.Fatal(err)
	}

	cc := &commandCounter{n: map[string]int{}}
	c.AddHook(cc)
	r := e.check(t, e.it)
	if !slices.Equal(r.MissingMarkers, []int64{2}) || len(r.ExtraMarkers)+len(r.WrongMarkers) != 0 || r.MarkerIndex != "ok" {
		t.Errorf("report %+v; want missing [2], index ok", r)
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.n["scan"] != 0 {
		t.Errorf("the pass sent %d SCANs; want none (commands %v)", cc.n["scan"], cc.n)
	}
	// One SSCAN per item (two items, each index smaller than a page).
	if cc.n["sscan"] != 2 {
		t.Errorf("the pass sent %d SSCANs; want 2 (commands %v)", cc.n["sscan"], cc.n)
	}
}

// TestBucketMarkerIndexes: a bucketed item has an index per bucket; one that
// is incomplete is read by a scan (an extra marker outside it is found) and
// the fix completes it, drift or not.
func TestBucketMarkerIndexes(t *testing.T) {
	t.Parallel()
	e := mustBucketEnv(t, 12, 3)
	ctx := context.Background()
	c := e.rdb.Client
	var user int64 = 1
	for stock.BucketOf(user, e.B) != 1 {
		user++
	}
	b1 := e.it.ForUser(user, e.B)
	b2 := e.it
	b2.Bucket = 2
	if err := c.Del(ctx, stocktest.KeysOf(e.st, b1).MarkerIndex(), stocktest.KeysOf(e.st, b2).MarkerIndex()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, stocktest.KeysOf(e.st, b1).Limit(user), "nobody", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := e.fixer.RunOnce(ctx)
	if err != nil || res.ExitCode() != reconciler.ExitClean || len(res.Found.Items) != 1 {
		t.Fatalf("fix: exit %d, %v, %+v", res.ExitCode(), err, res)
	}
	if f := res.Found.Items[0]; !slices.Equal(f.ExtraMarkers, []int64{user}) || f.MarkerIndex != "incomplete" {
		t.Errorf("found %+v; want extra [%d], index incomplete", f, user)
	}
	if a := res.After.Items[0]; a.MarkerIndex != "ok" || a.Drifted() {
		t.Errorf("after the fix %+v; want clean, index ok", a)
	}
	for b := range e.B {
		it := e.it
		it.Bucket = b
		if users, complete, err := e.st.Markers(ctx, it); err != nil || !complete || len(users) != 0 {
			t.Errorf("bucket %d after the fix: %v complete %v (%v); want [] complete", b, users, complete, err)
		}
	}
	if stocktest.MarkerOwner(t, e.st, b1, user) != "" {
		t.Error("extra marker survived the fix")
	}
	// No drift, only an incomplete index: the fix completes it all the same.
	if err := c.Del(ctx, stocktest.KeysOf(e.st, b2).MarkerIndex()).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := e.fixer.RunOnce(ctx); err != nil || res.ExitCode() != reconciler.ExitClean || res.After == nil {
		t.Fatalf("second fix: exit %d, %v, %+v", res.ExitCode(), err, res)
	}
	if _, complete, err := e.st.Markers(ctx, b2); err != nil || !complete {
		t.Errorf("bucket 2 after a fix without drift: complete %v (%v); want complete", complete, err)
	}
}
