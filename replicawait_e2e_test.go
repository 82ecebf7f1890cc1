package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

// replicaWaitPipeline is a gateway on Redis at addr (a primary with a
// replica, or a proxy in front of one) with REDIS_WAIT_REPLICAS=replicas.
func replicaWaitPipeline(t *testing.T, e engine, addr string, replicas int) *pipeline {
	t.Helper()
	return mustPipeline(t, e, components{"gateway"}, func(c *config) {
		c.Redis.Addr, c.Stock.Prefix = addr, ""
		// Long enough for a healthy replica on two shared cores under the
		// race detector; the tests that want no ack take the replica away.
		c.Stock.Wait = stock.ReplicaWait{Replicas: replicas, Timeout: time.Second}
		c.Gateway.ReplayWait = 100 * time.Millisecond
	})
}

// With REDIS_WAIT_REPLICAS=1 and the only replica paused, a reserve is
// acknowledged by no replica: the gateway must not produce and must give
// the reservation back. The release is acknowledged by no replica either,
// so the answer is 503 "the outcome is unknown", not "nothing was
// reserved": a replica that had read the reserve but not yet the release,
// promoted, would hold the reservation. Once the replica is back the
// release is retried until it is acknowledged, and a retry reserves afresh.
func testReplicaWaitFailsClosedWhenNoReplicaAcks(t *testing.T, e engine) {
	t.Parallel()
	pair := testenv.MustRedisPair(t)
	p := replicaWaitPipeline(t, e, pair.Primary.Addr, 1)
	p.mustSale(t, 1, 1, map[int64]int64{1: 10})
	onPrimary := stocktest.On(pair.Primary.Client(t), "")
	it := stock.Item{ActivityID: 1, ItemID: 1}
	body := orderBody{RequestID: "wait-1", UserID: 7, ActivityID: 1, ItemID: 1, Quantity: 1}

	pair.Replica.Pause(t)
	r := p.order(t, body)
	pair.Replica.Resume(t)
	if r.Status != http.StatusServiceUnavailable || r.Code() != "UNAVAILABLE" || r.Str("orderNo") != "" {
		t.Fatalf("with the replica paused: %d %v, want 503 UNAVAILABLE without an orderNo", r.Status, r.Body)
	}
	if msg := fmt.Sprint(r.Body["error"]); !strings.Contains(msg, "outcome is unknown") {
		t.Errorf("503 says %s, want \"the outcome is unknown\" (no replica acknowledged the release)", msg)
	}
	if n, ok := stocktest.Stock(t, onPrimary, it); !ok || n != 10 {
		t.Errorf("stock after the 503: %d (key present: %v), want 10", n, ok)
	}
	if owner := stocktest.MarkerOwner(t, onPrimary, it, body.UserID); owner != "" {
		t.Errorf("limit marker after the 503: held by %q, want none", owner)
	}
	if j := stocktest.Journal(t, onPrimary, it); len(j) != 0 {
		t.Errorf("journal after the 503: %d entries, want none", len(j))
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
	if n, ok := stocktest.Stock(t, onPrimary, it); !ok || n != 9 {
		t.Errorf("stock after the 202: %d (key present: %v), want 9", n, ok)
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
func testReplicaWaitFailoverLosesNo202(t *testing.T, e engine) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		replicas int
	}{{"WaitOff", 0}, {"WaitOn", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			pair := testenv.MustRedisPair(t)
			proxy := testenv.MustProxy(t, pair.Primary.Addr)
			p := replicaWaitPipeline(t, e, proxy.Addr, tc.replicas)
			p.mustSale(t, 1, 1, map[int64]int64{1: 100})
			it := stock.Item{ActivityID: 1, ItemID: 1}
			ctx := context.Background()

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
			pair.Replica.Promote(t)
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

			lookup := stock.New(pair.Replica.Client(t), "")
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

// testReplicaWaitFailoverKeepsTheWorkersClaim stages the failover window
// that waiting for the reserve alone leaves open. A request reserves O (on
// the replica too); its produce lands in Kafka but the gateway never hears
// the ack; a worker claims O on the primary while the replication link is
// cut, so the claim reaches no replica. The primary dies, the replica is promoted,
// and only then does the gateway's produce fail: its abort runs on the
// promoted replica, which knows no claim. If the worker decided O on its
// claim, O is an order while the abort gave O's reservation back and
// dropped its dedup record — the client's retry is answered 202 with a
// second orderNo, which can only be rejected (I3). With REDIS_WAIT_REPLICAS
// the worker decides only a claim a replica has acknowledged: here it
// waits, the abort wins on the promoted replica, O is a ghost, and the
// retry's orderNo is the request's one order. Either way, every orderNo a
// 2xx named must be that order.
func testReplicaWaitFailoverKeepsTheWorkersClaim(t *testing.T, e engine) {
	t.Parallel()
	// The replica follows the primary through a link the test can cut, as
	// the chaos suite's redis-failover does: what the primary writes while
	// it is cut never reaches the replica.
	primaryServer := testenv.MustRedisServer(t)
	link := testenv.MustProxy(t, primaryServer.Addr)
	linkHost, linkPort, _ := net.SplitHostPort(link.Addr)
	replicaServer := testenv.MustRedisServer(t, "--replicaof", linkHost, linkPort)
	ctx := context.Background()
	replicaServer.WaitSynced(t)
	proxy := testenv.MustProxy(t, primaryServer.Addr)
	var logs syncBuffer
	p := mustPipelineLogging(t, e, both, func(c *config) {
		c.Redis.Addr, c.Stock.Prefix = proxy.Addr, ""
		c.Stock.Wait = stock.ReplicaWait{Replicas: 1, Timeout: time.Second}
		c.Gateway.ReplayWait = 100 * time.Millisecond
		c.Gateway.ProduceTimeout = time.Minute // the produce fails when the test says so
	}, &logs)
	if p.Kafka.Cluster == nil {
		t.Skip("needs the in-process broker to hold a produce request")
	}
	it := stock.Item{ActivityID: 1, ItemID: 1}
	p.mustSale(t, 1, 1, map[int64]int64{1: 10})
	primary := primaryServer.Client(t)
	onPrimary, stockOnPrimary := stocktest.On(primary, ""), stock.New(primary, "")

	// The gateway's produce requests are held, then failed once the test
	// says so (its producer tries three times, each bounded at 2 s, so the
	// gateway hears of the failure about 6 s after its first try, or at
	// once when told); the test's copy of the event and, after the first
	// answer, every request are served.
	const (
		hold int32 = iota
		passOne
		fail
		serve
	)
	var mode atomic.Int32
	held, failed := make(chan struct{}), make(chan struct{})
	var heldOnce sync.Once
	c := p.Kafka.Cluster
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		switch mode.Load() {
		case serve:
			return nil, nil, false
		case passOne:
			if mode.CompareAndSwap(passOne, hold) {
				return nil, nil, false
			}
		case hold:
			heldOnce.Do(func() { close(held) })
			c.SleepControl(func() { <-failed })
		}
		return nil, errors.New("the produce's ack was lost"), true
	})

	body := orderBody{RequestID: "claim-lost", UserID: 5, ActivityID: 1, ItemID: 1, Quantity: 1}
	answer := make(chan apiResponse, 1)
	go func() { answer <- p.order(t, body) }()
	<-held
	entry, ok, err := stockOnPrimary.Journaled(ctx, it, body.RequestID)
	if err != nil || !ok {
		t.Fatalf("the reservation's journal entry on the primary: %v %v", ok, err)
	}
	ev, err := event.Decode(entry)
	if err != nil {
		t.Fatal(err)
	}
	// The produce lands (the broker holds the very event the gateway
	// journaled and sent) while the replication link is cut.
	link.Hang()
	w := event.NewWriter(event.WriterConfig{Brokers: p.Kafka.Brokers, Topic: p.Cfg.Kafka.Topic})
	defer w.Close()
	mode.Store(passOne)
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(it.String()), Value: entry,
		Headers: []kafka.Header{{Key: event.HeaderSignature, Value: []byte(event.Signature(entry))}}}); err != nil {
		t.Fatal(err)
	}
	// The worker claims it on the primary and acts on the answer: it makes
	// the order, or (its claim unacknowledged) fails the batch to retry it.
	testenv.WaitFor(t, 20*time.Second, "the worker to claim "+ev.OrderNo+" and act on it", func() bool {
		if stocktest.Fate(t, onPrimary, it, ev.OrderNo) != "claimed:"+ev.OrderNo {
			return false
		}
		if _, err := p.Orders.GetOrder(ctx, ev.OrderNo); err == nil {
			return true
		}
		return strings.Contains(logs.String(), stock.ErrUnreplicated.Error())
	})

	// The failover: the primary dies with the claim, the replica is
	// promoted and the Redis address moved to it.
	primaryServer.Stop()
	replicaServer.Promote(t)
	proxy.Retarget(replicaServer.Addr)
	select {
	case a := <-answer:
		t.Fatalf("the gateway gave up its produce before the failover was staged (%d %v): too slow a machine", a.Status, a.Body)
	default:
	}
	// Now the gateway's produce fails: its abort runs on the promoted replica.
	mode.Store(fail)
	close(failed)
	a := <-answer
	mode.Store(serve)
	// The promoted replica gets a replica of its own, so reserves and claims
	// are acknowledged again.
	testenv.MustReplicaOf(t, replicaServer)

	shown := map[string]bool{}
	if a.Status == http.StatusAccepted {
		shown[a.Str("orderNo")] = true
	} else if a.Status != http.StatusServiceUnavailable {
		t.Fatalf("first attempt: %d %v, want 202 or 503", a.Status, a.Body)
	}
	var r apiResponse
	testenv.WaitFor(t, 30*time.Second, "a retry answered 2xx", func() bool {
		r = p.order(t, body)
		return r.Status == http.StatusAccepted || r.Status == http.StatusOK
	})
	shown[r.Str("orderNo")] = true
	t.Logf("first attempt %d %v, retry %d %v", a.Status, a.Body, r.Status, r.Body)
	for orderNo := range shown {
		testenv.WaitFor(t, 30*time.Second, orderNo+" to be decided", func() bool {
			_, err := p.Orders.GetOrder(ctx, orderNo)
			return err == nil
		})
	}
	// The request's orderNos are the first attempt's and those shown:
	// every one shown is its order (orders.request_id is unique, so there
	// is one), and the first attempt's is not one unless shown.
	for _, orderNo := range append(slices.Collect(maps.Keys(shown)), ev.OrderNo) {
		o, err := p.Orders.GetOrder(ctx, orderNo)
		isOrder := err == nil && o.Status == order.StatusUnpaid && o.RequestID == body.RequestID
		if shown[orderNo] && !isOrder {
			t.Errorf("I3: request %s was answered 2xx with %s, which is %s %s (%v), not its order (the first attempt's %s, decided on a claim the failover lost)",
				body.RequestID, orderNo, o.Status, o.Reason, err, ev.OrderNo)
		}
		if !shown[orderNo] && isOrder {
			t.Errorf("I3: %s, the first attempt's orderNo, is an order though no 2xx named it", orderNo)
		}
	}
	// Nothing oversold or left taken: one unit sold, in Postgres and on
	// the promoted replica once the journal is drained.
	if s := p.dbStock(t, it); s.Stock != 9 {
		t.Errorf("db stock %d, want 9 (one order)", s.Stock)
	}
	st := stock.New(replicaServer.Client(t), "")
	testenv.WaitFor(t, 30*time.Second, "the promoted replica's journal to drain", func() bool {
		snap, err := st.Snapshot(ctx, it)
		return err == nil && len(snap.Journal) == 0
	})
	if snap, err := st.Snapshot(ctx, it); err != nil || snap.Stock == nil || *snap.Stock != 9 {
		t.Errorf("redis stock on the promoted replica: %+v %v, want 9", snap, err)
	}
}
