package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/event"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

// replicaWaitPipeline is a gateway on Redis at addr (a primary with a
// replica, or a proxy in front of one) with REDIS_WAIT_REPLICAS=replicas.
func replicaWaitPipeline(t *testing.T, addr string, replicas int) *pipeline {
	t.Helper()
	return mustPipeline(t, components{"gateway"}, func(c *config) {
		c.RedisAddr, c.RedisPrefix = addr, ""
		// Long enough for a healthy replica on two shared cores under the
		// race detector; the tests that want no ack take the replica away.
		c.RedisWait = stock.ReplicaWait{Replicas: replicas, Timeout: time.Second}
		c.ReplayWait = 100 * time.Millisecond
	})
}

// With REDIS_WAIT_REPLICAS=1 and the only replica paused, a reserve is
// acknowledged by no replica: the gateway must not produce, must give the
// reservation back and answer 503 "nothing was reserved".
func TestReplicaWaitFailsClosedWhenNoReplicaAcks(t *testing.T) {
	t.Parallel()
	pair := testenv.MustRedisPair(t)
	p := replicaWaitPipeline(t, pair.Primary.Addr, 1)
	p.mustSale(t, 1, 1, map[int64]int64{1: 10})
	rdb := redis.NewClient(&redis.Options{Addr: pair.Primary.Addr})
	defer rdb.Close()
	ctx := context.Background()
	it := stock.Item{ActivityID: 1, ItemID: 1}
	k := stocktest.KeysOf(stock.New(rdb, ""), it)
	body := orderBody{RequestID: "wait-1", UserID: 7, ActivityID: 1, ItemID: 1, Quantity: 1}

	pair.Replica.Pause(t)
	r := p.order(t, body)
	pair.Replica.Resume(t)
	if r.Status != http.StatusServiceUnavailable || r.Code() != "UNAVAILABLE" || r.Str("orderNo") != "" {
		t.Fatalf("with the replica paused: %d %v, want 503 UNAVAILABLE without an orderNo", r.Status, r.Body)
	}
	if msg := fmt.Sprint(r.Body["error"]); !strings.Contains(msg, "nothing was reserved") {
		t.Errorf("503 says %s, want \"nothing was reserved\"", msg)
	}
	if n, err := rdb.Get(ctx, k.Stock).Int64(); err != nil || n != 10 {
		t.Errorf("stock after the 503: %d (%v), want 10", n, err)
	}
	if n, err := rdb.Exists(ctx, k.Limit(body.UserID)).Result(); err != nil || n != 0 {
		t.Errorf("limit marker after the 503: %d (%v), want none", n, err)
	}
	if n, err := rdb.HLen(ctx, k.Journal).Result(); err != nil || n != 0 {
		t.Errorf("journal after the 503: %d entries (%v), want none", n, err)
	}

	// Replica back: the retry reserves afresh, and its event is the first
	// on the topic (the item has one partition): none was produced for the
	// 503.
	r = p.order(t, body)
	if r.Status != http.StatusAccepted {
		t.Fatalf("retry with the replica back: %d %v, want 202", r.Status, r.Body)
	}
	ev, err := event.Decode(mustReadEvent(t, p).Value)
	if err != nil {
		t.Fatal(err)
	}
	if ev.OrderNo != r.Str("orderNo") {
		t.Errorf("first event on the topic is %s, want the retry's %s: the 503 produced one", ev.OrderNo, r.Str("orderNo"))
	}
	if n, err := rdb.Get(ctx, k.Stock).Int64(); err != nil || n != 9 {
		t.Errorf("stock after the 202: %d (%v), want 9", n, err)
	}
}

// A failover to a replica that lags: requests accepted while the replica
// was in sync, then the replica is promoted (REPLICAOF NO ONE) while the
// old primary still takes requests, then the gateway is moved to it. With
// REDIS_WAIT_REPLICAS=1 every 202 is on the promoted replica, so a retry of
// an accepted requestId is answered its orderNo (or 503 while it is not yet
// known durable), never a second one; what the old primary took after the
// promotion was answered 503. Without it, what the old primary took after
// the promotion was answered 202 and its retry is reserved again under a
// second orderNo: the window the setting closes.
func TestReplicaWaitFailoverLosesNo202(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		replicas int
	}{{"WaitOff", 0}, {"WaitOn", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			pair := testenv.MustRedisPair(t)
			proxy := testenv.MustProxy(t, pair.Primary.Addr)
			p := replicaWaitPipeline(t, proxy.Addr, tc.replicas)
			p.mustSale(t, 1, 1, map[int64]int64{1: 100})
			it := stock.Item{ActivityID: 1, ItemID: 1}
			ctx := context.Background()
			promoted := redis.NewClient(&redis.Options{Addr: pair.Replica.Addr})
			defer promoted.Close()

			type req struct {
				body  orderBody
				first apiResponse
			}
			var before, after []req
			for i := range 3 {
				b := orderBody{RequestID: fmt.Sprintf("before-%d", i), UserID: int64(i + 1), ActivityID: 1, ItemID: 1, Quantity: 1}
				r := p.order(t, b)
				if r.Status != http.StatusAccepted {
					t.Fatalf("%s with the replica in sync: %d %v, want 202", b.RequestID, r.Status, r.Body)
				}
				before = append(before, req{b, r})
			}
			// The promotion: the replica stops replicating; the old primary,
			// not told yet, still answers the gateway.
			if err := promoted.Do(ctx, "replicaof", "no", "one").Err(); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				b := orderBody{RequestID: fmt.Sprintf("after-%d", i), UserID: int64(i + 11), ActivityID: 1, ItemID: 1, Quantity: 1}
				r := p.order(t, b)
				want := http.StatusAccepted
				if tc.replicas > 0 {
					want = http.StatusServiceUnavailable
				}
				if r.Status != want {
					t.Fatalf("%s on the old primary after the promotion: %d %v, want %d", b.RequestID, r.Status, r.Body, want)
				}
				after = append(after, req{b, r})
			}
			// The failover completes: the gateway is moved to the promoted
			// replica, which gets a replica of its own; the old primary dies.
			testenv.MustReplicaOf(t, pair.Replica)
			proxy.Retarget(pair.Replica.Addr)
			pair.Primary.Stop()

			lookup := stock.New(promoted, "")
			lost := 0
			for _, q := range append(before, after...) {
				accepted := q.first.Status == http.StatusAccepted
				orderNo := q.first.Str("orderNo")
				if accepted {
					if _, ok, err := lookup.Pending(ctx, it, orderNo); err != nil {
						t.Fatal(err)
					} else if !ok {
						lost++
						t.Logf("%s: the promoted replica does not know the 202's orderNo %s", q.body.RequestID, orderNo)
					}
				}
				// Retry until the answer is not a 503 (a replay waits for the
				// record to be known durable; with no worker here it may
				// stay 503, which shows nothing).
				var r apiResponse
				for range 10 {
					if r = p.order(t, q.body); r.Status != http.StatusServiceUnavailable {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				switch {
				case accepted && (r.Status == http.StatusOK || r.Status == http.StatusAccepted) && r.Str("orderNo") != orderNo:
					lost++
					t.Logf("%s: accepted as %s, its retry answered %d with a second orderNo %s", q.body.RequestID, orderNo, r.Status, r.Str("orderNo"))
				case accepted && r.Status != http.StatusOK && r.Status != http.StatusServiceUnavailable:
					t.Errorf("%s: accepted as %s, its retry answered %d %v, want 200 replayed or 503", q.body.RequestID, orderNo, r.Status, r.Body)
				case !accepted && r.Status != http.StatusAccepted:
					t.Errorf("%s: answered 503 before the failover, its retry %d %v, want a fresh 202", q.body.RequestID, r.Status, r.Body)
				}
			}
			if tc.replicas > 0 && lost > 0 {
				t.Errorf("with REDIS_WAIT_REPLICAS=1 the failover lost %d 202s", lost)
			}
			if tc.replicas == 0 && lost == 0 {
				t.Errorf("without REDIS_WAIT_REPLICAS the failover lost no 202: the test no longer opens the window it is about")
			}
		})
	}
}
