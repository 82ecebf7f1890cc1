package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/gateway/client"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// testReplayWhileProducingIsNeverLost: request A reserves orderNo O and
// starts its produce; the broker stalls; the client times out and retries
// as B. Until O's event is in Kafka it lives in Redis alone, so B must not be
// shown O (I4: Redis lost at that instant would make the answer a lie): it is
// answered 503 without an orderNo and reserves nothing. Then either A's
// produce lands (a retry is shown O) or it fails (O is given back, nobody saw
// it, and a retry reserves afresh).
func testReplayWhileProducingIsNeverLost(t *testing.T, e engine) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		lands bool // whether A's stalled produce lands once resumed
	}{{"ProduceLands", true}, {"ProduceFails", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPipeline(t, e, both, func(c *config) {
				// Well below the producer's 2 s write timeout, so A is
				// still producing when B gives up; when the produce is to
				// fail, A gives up (that timeout) while stalled.
				c.Gateway.ReplayWait = 200 * time.Millisecond
				c.Worker.RedriveAfter = time.Second
				c.Worker.RedriveInterval = 200 * time.Millisecond
			})
			if p.Kafka.Cluster == nil {
				t.Skip("needs the in-process broker to stall its produce requests")
			}
			it := stock.Item{ActivityID: 3, ItemID: 1}
			p.mustSale(t, 3, 1, map[int64]int64{1: 5})
			stalled, resume := p.Kafka.StallProduce(tc.lands)

			body := orderBody{RequestID: "retried", UserID: 7, ActivityID: 3, ItemID: 1, Quantity: 1}
			first := make(chan apiResponse, 1)
			go func() { first <- p.order(t, body) }()
			<-stalled // A has reserved and its produce is in flight
			b := p.order(t, body)
			if b.Status != http.StatusServiceUnavailable || b.Code() != "UNAVAILABLE" || b.Str("orderNo") != "" ||
				b.Header.Get("Retry-After") == "" {
				t.Fatalf("retry during the produce: %d %v, want 503 UNAVAILABLE with Retry-After and no orderNo", b.Status, b.Body)
			}
			if rs := p.redisStock(t, it); rs != 4 {
				t.Errorf("redis stock %d after the waiting retry, want 4 (it reserved nothing)", rs)
			}
			var a apiResponse
			if tc.lands {
				close(resume)
				a = <-first
			} else {
				a = <-first // timed out while stalled
				close(resume)
			}
			if tc.lands {
				if a.Status != http.StatusAccepted || a.Str("orderNo") == "" {
					t.Fatalf("first attempt, produce landed: %d %v", a.Status, a.Body)
				}
				orderNo := a.Str("orderNo")
				var r apiResponse
				// The mark is set just after the 202, or the worker claims it.
				testenv.WaitFor(t, 20*time.Second, "a retry to be shown "+orderNo, func() bool {
					r = p.order(t, body)
					return r.Status != http.StatusServiceUnavailable
				})
				if r.Status != http.StatusOK || r.Body["replayed"] != true || r.Str("orderNo") != orderNo {
					t.Fatalf("retry after the produce landed: %d %v, want 200 replayed %s", r.Status, r.Body, orderNo)
				}
				testenv.WaitFor(t, 20*time.Second, "order "+orderNo, func() bool {
					o, err := p.Orders.GetOrder(t.Context(), orderNo)
					return err == nil && o.Status == order.StatusUnpaid
				})
			} else {
				if a.Status != http.StatusServiceUnavailable || a.Str("orderNo") != "" {
					t.Fatalf("first attempt, produce failed: %d %v, want 503 without an orderNo", a.Status, a.Body)
				}
				if rs := p.redisStock(t, it); rs != 5 {
					t.Errorf("redis stock %d after the failed produce, want 5 (given back)", rs)
				}
				r := p.order(t, body)
				if r.Status != http.StatusAccepted || r.Str("orderNo") == "" {
					t.Fatalf("retry after the failed produce: %d %v, want a new 202", r.Status, r.Body)
				}
				orderNo := r.Str("orderNo")
				testenv.WaitFor(t, 20*time.Second, "order "+orderNo, func() bool {
					o, err := p.Orders.GetOrder(t.Context(), orderNo)
					return err == nil && o.Status == order.StatusUnpaid
				})
				if again := p.order(t, body); again.Status != http.StatusOK || again.Str("orderNo") != orderNo {
					t.Errorf("a later retry: %d %v, want 200 %s", again.Status, again.Body, orderNo)
				}
			}
			p.assertSettled(t, it, 4, "one order")
		})
	}
}

// testReplayAfterRedisLossShowsNothingLost: a retry while the first
// attempt's produce is stalled is answered 503; then Redis loses the sale's
// keys (restart without persistence, failover to a lagging replica). No 2xx
// ever named an orderNo that Kafka does not have: the first attempt's
// produce lands, its orderNo becomes an order, and nothing else was shown.
func testReplayAfterRedisLossShowsNothingLost(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, both, func(c *config) { c.Gateway.ReplayWait = 200 * time.Millisecond })
	if p.Kafka.Cluster == nil {
		t.Skip("needs the in-process broker to stall its produce requests")
	}
	p.mustSale(t, 5, 1, map[int64]int64{1: 5})
	stalled, resume := p.Kafka.StallProduce(true)
	body := orderBody{RequestID: "lost-redis", UserID: 8, ActivityID: 5, ItemID: 1, Quantity: 1}
	first := make(chan apiResponse, 1)
	go func() { first <- p.order(t, body) }()
	<-stalled
	if b := p.order(t, body); b.Status != http.StatusServiceUnavailable || b.Str("orderNo") != "" {
		t.Fatalf("retry during the produce: %d %v, want 503 without an orderNo", b.Status, b.Body)
	}
	// Redis loses everything of the sale.
	var keys []string
	iter := p.Redis.Client.Scan(t.Context(), 0, p.Redis.Prefix+"*", 1000).Iterator()
	for iter.Next(t.Context()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil || len(keys) == 0 {
		t.Fatalf("scanning the sale's keys: %d %v", len(keys), err)
	}
	if err := p.Redis.Client.Del(t.Context(), keys...).Err(); err != nil {
		t.Fatal(err)
	}
	close(resume)
	a := <-first
	if a.Status != http.StatusAccepted || a.Str("orderNo") == "" {
		t.Fatalf("first attempt: %d %v", a.Status, a.Body)
	}
	// Every orderNo a 2xx named (only A's) resolves to an order.
	testenv.WaitFor(t, 20*time.Second, "order "+a.Str("orderNo"), func() bool {
		o, err := p.Orders.GetOrder(t.Context(), a.Str("orderNo"))
		return err == nil && o.Status == order.StatusUnpaid
	})
	if _, err := p.orderOf(t, a.Str("orderNo")); err != nil {
		t.Errorf("GET %s: %v", a.Str("orderNo"), err)
	}
}

// testRequestIDReusedForAnotherItem: the same requestId for another item is
// a reservation the gateway's one atomic step cannot tell from a new one
// (another hash tag): it is answered 202, and the worker refuses it. Its
// orderNo must then read as REJECTED IDEMPOTENCY_KEY_REUSED — never 404 — a
// replay names it again, and its unit goes back on sale. The client's
// mistake is logged at INFO: no WARN for an operator to act on.
func testRequestIDReusedForAnotherItem(t *testing.T, e engine) {
	t.Parallel()
	var logs syncBuffer
	p := mustPipelineLogging(t, e, both, nil, &logs)
	first, second := stock.Item{ActivityID: 4, ItemID: 1}, stock.Item{ActivityID: 4, ItemID: 2}
	p.mustSale(t, 4, 1, map[int64]int64{1: 5, 2: 5})
	a := p.mustAccept(t, orderBody{RequestID: "reused", UserID: 9, ActivityID: 4, ItemID: 1, Quantity: 1})
	testenv.WaitFor(t, 20*time.Second, "the first order", func() bool {
		o, err := p.Orders.GetOrder(t.Context(), a.Str("orderNo"))
		return err == nil && o.Status == order.StatusUnpaid
	})
	b := p.mustAccept(t, orderBody{RequestID: "reused", UserID: 9, ActivityID: 4, ItemID: 2, Quantity: 1})
	var g client.Order
	testenv.WaitFor(t, 20*time.Second, "the reused requestId's reservation to be decided", func() bool {
		var err error
		g, err = p.orderOf(t, b.Str("orderNo"))
		return err == nil && g.Status != client.StatusPending
	})
	if g.Status != client.StatusRejected || g.Reason != "IDEMPOTENCY_KEY_REUSED" || g.RequestID != "reused" {
		t.Fatalf("GET of the refused reservation: %+v", g)
	}
	if r := p.order(t, orderBody{RequestID: "reused", UserID: 9, ActivityID: 4, ItemID: 2, Quantity: 1}); r.Str("orderNo") != b.Str("orderNo") {
		t.Errorf("replay after the refusal: %d %v, want orderNo %s", r.Status, r.Body, b.Str("orderNo"))
	}
	// On call sees both reservations of the requestId.
	if rep := mustLocate(t, p, "reused"); rep.OrderNo != a.Str("orderNo") || len(rep.Refused) != 1 ||
		rep.Refused[0].OrderNo != b.Str("orderNo") || rep.Refused[0].Reason != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("locate reused: orderNo %s, refused %+v", rep.OrderNo, rep.Refused)
	}
	p.waitDrained(t, second)
	p.assertInvariants(t, first)
	p.assertInvariants(t, second)
	if s, rs := p.dbStock(t, second), p.redisStock(t, second); s.Stock != 5 || rs != 5 {
		t.Errorf("item 2 stock db %d redis %d, want 5 (nothing sold)", s.Stock, rs)
	}
	if !strings.Contains(logs.String(), `"reason":"IDEMPOTENCY_KEY_REUSED"`) {
		t.Error("the rejection of the reused requestId is not logged")
	}
	if w := logs.warnings(t); len(w) > 0 {
		t.Errorf("a requestId reused for another item logged WARN/ERROR lines:\n%s", strings.Join(w, "\n"))
	}
}

// testPoisonCopiesOfARealEventChangeNothing: a message is only a pointer to
// a reservation, the journal entry the gateway wrote is the truth. With no
// worker running, a client is answered 202; then a copy of the event the
// gateway really wrote lands on the topic before a worker reads either — a
// copy with an extra field (a newer gateway), a corrupt one, a truncated
// one, one that claims another user and quantity. Whatever the copy, the
// order is made exactly as the gateway reserved it, GET answers it, and
// nothing is given back.
func testPoisonCopiesOfARealEventChangeNothing(t *testing.T, e engine) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		copy func(orig []byte) []byte
	}{
		{"FieldAdded", func(v []byte) []byte { return append(bytes.TrimSuffix(v, []byte("}")), []byte(`,"giftWrap":true}`)...) }},
		{"Corrupt", func(v []byte) []byte { return bytes.Replace(v, []byte(`"quantity":1`), []byte(`"quantity":"one"`), 1) }},
		{"Truncated", func(v []byte) []byte { return v[:len(v)/2] }},
		{"OtherUserAndQuantity", func(v []byte) []byte {
			v = bytes.Replace(v, []byte(`"userId":21`), []byte(`"userId":22`), 1)
			return bytes.Replace(v, []byte(`"quantity":1`), []byte(`"quantity":3`), 1)
		}},
		{"OtherUserAndInvalid", func(v []byte) []byte {
			v = bytes.Replace(v, []byte(`"userId":21`), []byte(`"userId":22`), 1)
			return bytes.Replace(v, []byte(`"quantity":1`), []byte(`"quantity":1000`), 1)
		}},
		// Valid values the gateway did not sign: the same reservation under
		// another requestId or another orderNo, and one made up.
		{"OtherRequestID", func(v []byte) []byte {
			return bytes.Replace(v, []byte(`"requestId":"poisoned"`), []byte(`"requestId":"poisoned-2"`), 1)
		}},
		{"OtherOrderNo", func(v []byte) []byte { return bytes.Replace(v, []byte(`","userId":21`), []byte(`-2","userId":21`), 1) }},
		{"MadeUp", func([]byte) []byte {
			return event.OrderRequested{RequestID: "made-up", OrderNo: "9-1-madeup", UserID: 23, ActivityID: 9, ItemID: 1, Quantity: 1,
				ReservedAt: time.Now().UTC()}.Marshal()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPipeline(t, e, components{"gateway"}, nil)
			it := stock.Item{ActivityID: 9, ItemID: 1}
			p.mustSale(t, 9, 1, map[int64]int64{1: 5})
			r := p.mustAccept(t, orderBody{RequestID: "poisoned", UserID: 21, ActivityID: 9, ItemID: 1, Quantity: 1})
			orig := mustReadEvent(t, p)
			cp := orig
			cp.Value = tc.copy(append([]byte(nil), orig.Value...))
			if bytes.Equal(cp.Value, orig.Value) {
				t.Fatalf("the copy is the original: %s", cp.Value)
			}
			w := event.NewWriter(event.WriterConfig{Brokers: p.Kafka.Brokers, Topic: p.Cfg.Kafka.Topic})
			defer w.Close()
			mustWrite(t, context.Background(), w, kafka.Message{Key: cp.Key, Value: cp.Value, Headers: cp.Headers})
			p.startWorker(t)
			p.waitDrained(t, it)
			testenv.WaitFor(t, 20*time.Second, "the order to be persisted", func() bool {
				o, err := p.Orders.GetOrder(context.Background(), r.Str("orderNo"))
				return err == nil && o.Status != ""
			})
			p.assertInvariants(t, it)
			o, err := p.Orders.GetOrder(context.Background(), r.Str("orderNo"))
			if err != nil {
				t.Fatal(err)
			}
			if o.Status != order.StatusUnpaid || o.UserID != 21 || o.Quantity != 1 {
				t.Errorf("order %+v, want UNPAID for user 21, quantity 1 (as reserved)", o)
			}
			if rs := p.redisStock(t, it); rs != 4 {
				t.Errorf("redis stock %d, want 4", rs)
			}
		})
	}
}

// mustReadEvent reads the first event on the pipeline's topic.
func mustReadEvent(t *testing.T, p *pipeline) kafka.Message {
	t.Helper()
	reader := kafka.NewReader(kafka.ReaderConfig{Brokers: p.Kafka.Brokers, GroupID: testenv.UniqueName("g"), Topic: p.Cfg.Kafka.Topic,
		StartOffset: kafka.FirstOffset, MaxWait: 50 * time.Millisecond})
	defer reader.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	msg, err := reader.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}
