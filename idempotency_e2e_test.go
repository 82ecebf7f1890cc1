package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// keyed sends an order with an Idempotency-Key header (value as written).
func (p *pipeline) keyed(tb testing.TB, key string, body any) apiResponse {
	tb.Helper()
	r := p.do(tb, http.MethodPost, "/v1/orders", "application/json", body, "Idempotency-Key", key)
	if (r.Status == http.StatusAccepted || r.Status == http.StatusOK) && r.Str("orderNo") != "" {
		p.mu.Lock()
		if p.accepted == nil {
			p.accepted = map[string]string{}
		}
		p.accepted[r.Str("orderNo")] = r.Str("requestId")
		p.mu.Unlock()
	}
	return r
}

// testIdempotencyKeyOnOrders: the Idempotency-Key header is the requestId
// (quoted sf-string or bare); the body may leave it out; both and different,
// a bad key or the header twice is 400 and reserves nothing; the key with
// another payload is 422; the same again replays the first answer, with its
// payBy, on this gateway and on another replica. The 202, the replay, GET
// and the UNPAID event show the same payBy: reservedAt + CLOSE_AFTER.
func testIdempotencyKeyOnOrders(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "relay"}, nil)
	it := stock.Item{ActivityID: 48, ItemID: 2}
	p.mustSale(t, 48, 2, map[int64]int64{2: 10})
	body := map[string]any{"userId": 1, "activityId": 48, "itemId": 2, "quantity": 1}

	first := p.keyed(t, `"k-48.1"`, body)
	if first.Status != http.StatusAccepted || first.Str("requestId") != "k-48.1" || first.Str("payBy") == "" {
		t.Fatalf("a body without requestId, keyed by header: %d %v, want 202 with requestId k-48.1 and payBy", first.Status, first.Body)
	}
	orderNo, payBy := first.Str("orderNo"), first.Str("payBy")

	t.Run("RefusedChangeNothing", func(t *testing.T) {
		before := p.redisStock(t, it)
		for _, c := range []struct {
			name string
			key  string
			body any
		}{
			{"Mismatch", `"k-48.1"`, map[string]any{"requestId": "other", "userId": 1, "activityId": 48, "itemId": 2, "quantity": 1}},
			{"Space", `"a b"`, body},
			{"TooLong", `"` + strings.Repeat("k", 65) + `"`, body},
			{"Unterminated", `"k-48.9`, body},
			{"Empty", `""`, body},
			{"List", `"k-1", "k-2"`, body},
		} {
			if r := p.keyed(t, c.key, c.body); r.Status != http.StatusBadRequest || r.Code() != "INVALID_REQUEST" {
				t.Errorf("%s (Idempotency-Key: %s): %d %v, want 400 INVALID_REQUEST", c.name, c.key, r.Status, r.Body)
			}
		}
		raw, err := p.api().Do(contractCtx(t, "POST /v1/orders"), http.MethodPost, "/v1/orders", "application/json",
			[]byte(`{"userId":1,"activityId":48,"itemId":2,"quantity":1}`), http.Header{"Idempotency-Key": {`"k-48.7"`, `"k-48.8"`}})
		if err != nil || raw.Status != http.StatusBadRequest {
			t.Errorf("the header twice: %v %v, want 400", raw, err)
		}
		if r := p.do(t, http.MethodPost, "/v1/orders", "application/json", body); r.Status != http.StatusBadRequest {
			t.Errorf("neither requestId nor header: %d %v, want 400", r.Status, r.Body)
		}
		if after := p.redisStock(t, it); after != before {
			t.Errorf("redis stock %d after the refusals, was %d", after, before)
		}
	})

	t.Run("ReusedWithAnotherPayload", func(t *testing.T) {
		for _, b := range []map[string]any{
			{"userId": 1, "activityId": 48, "itemId": 2, "quantity": 2},
			{"userId": 2, "activityId": 48, "itemId": 2, "quantity": 1},
		} {
			if r := p.keyed(t, `"k-48.1"`, b); r.Status != http.StatusUnprocessableEntity || r.Code() != "IDEMPOTENCY_KEY_REUSED" {
				t.Errorf("key reused with %v: %d %v, want 422", b, r.Status, r.Body)
			}
		}
	})

	t.Run("BareKey", func(t *testing.T) {
		r := p.keyed(t, "k-48.bare", map[string]any{"requestId": "k-48.bare", "userId": 3, "activityId": 48, "itemId": 2, "quantity": 1})
		if r.Status != http.StatusAccepted || r.Str("requestId") != "k-48.bare" {
			t.Errorf("a bare key (same as the body's): %d %v, want 202", r.Status, r.Body)
		}
	})

	unpaid := p.waitStatus(t, orderNo, order.StatusUnpaid)
	if pb, err := time.Parse(time.RFC3339Nano, payBy); err != nil || unpaid.PayBy == nil || !unpaid.PayBy.Equal(pb) {
		t.Errorf("GET of the UNPAID order shows payBy %v, the 202 %q", unpaid.PayBy, payBy)
	}
	created := unpaid.CreatedAt
	// payBy counts from the reservation, which the commit (createdAt) follows.
	if pb, err := time.Parse(time.RFC3339Nano, payBy); err != nil || pb.Add(-p.Cfg.Closer.CloseAfter).After(created) {
		t.Errorf("payBy %s (%v) - CLOSE_AFTER %s is after the order's createdAt %s", payBy, err, p.Cfg.Closer.CloseAfter, unpaid.CreatedAt)
	}
	evs, err := p.Orders.EventsOf(context.Background(), orderNo)
	if err != nil || len(evs) == 0 {
		t.Fatalf("events of %s: %v %v", orderNo, evs, err)
	}
	var ev struct {
		Status, PayBy string
	}
	if err := json.Unmarshal(evs[0].Payload, &ev); err != nil || ev.Status != order.StatusUnpaid || ev.PayBy != payBy {
		t.Errorf("the UNPAID event %s (%v): want payBy %s", evs[0].Payload, err, payBy)
	}

	replays := func(t *testing.T, g *pipeline) {
		r := g.keyed(t, `"k-48.1"`, body)
		if r.Status != http.StatusOK || r.Body["replayed"] != true || r.Str("orderNo") != orderNo || r.Str("payBy") != payBy {
			t.Errorf("the key again: %d %v, want 200 replayed of %s with payBy %s", r.Status, r.Body, orderNo, payBy)
		}
	}
	t.Run("Replay", func(t *testing.T) { replays(t, p) })
	t.Run("ReplayOnAnotherGateway", func(t *testing.T) { replays(t, startGateway(t, p.Cfg)) })

	p.waitDrained(t, it)
	if rs := p.redisStock(t, it); rs != 8 {
		t.Errorf("redis stock %d, want 8 (two orders)", rs)
	}
	p.assertInvariants(t, it)
}

// stallProduces holds the pipeline's produce requests (its in-process
// broker) until the returned release is called.
func stallProduces(t *testing.T, p *pipeline) (stalled <-chan struct{}, release func()) {
	t.Helper()
	if p.Kafka.Cluster == nil {
		t.Skip("needs the in-process broker to stall its produce requests")
	}
	st, resume := p.Kafka.StallProduce(true)
	var closeOnce sync.Once
	release = func() { closeOnce.Do(func() { close(resume) }) }
	t.Cleanup(release)
	return st, release
}

// testIdempotencyKeyInProgress: a keyed retry while the first attempt's
// event is held on its way to Kafka is 409 IDEMPOTENCY_KEY_IN_PROGRESS with
// Retry-After, at once and on any replica; once the first is answered, the
// retry replays it.
func testIdempotencyKeyInProgress(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	it := stock.Item{ActivityID: 49, ItemID: 1}
	p.mustSale(t, 49, 1, map[int64]int64{1: 5})
	other := startGateway(t, p.Cfg)
	body := map[string]any{"userId": 7, "activityId": 49, "itemId": 1, "quantity": 1}

	stalled, release := stallProduces(t, p)
	first := make(chan apiResponse, 1)
	go func() { first <- p.keyed(t, `"k-49"`, body) }()
	<-stalled
	for name, g := range map[string]*pipeline{"SameGateway": p, "OtherGateway": other} {
		r := g.keyed(t, `"k-49"`, body)
		if r.Status != http.StatusConflict || r.Code() != "IDEMPOTENCY_KEY_IN_PROGRESS" || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s: a retry while the first is in progress: %d %v (Retry-After %q), want 409 IDEMPOTENCY_KEY_IN_PROGRESS with Retry-After",
				name, r.Status, r.Body, r.Header.Get("Retry-After"))
		}
	}
	release()
	f := <-first
	if f.Status != http.StatusAccepted {
		t.Fatalf("the first attempt: %d %v, want 202", f.Status, f.Body)
	}
	for name, g := range map[string]*pipeline{"SameGateway": p, "OtherGateway": other} {
		r := g.keyed(t, `"k-49"`, body)
		if r.Status != http.StatusOK || r.Str("orderNo") != f.Str("orderNo") || r.Str("payBy") != f.Str("payBy") {
			t.Errorf("%s: the retry after the 202: %d %v, want 200 replay of %s", name, r.Status, r.Body, f.Str("orderNo"))
		}
	}
	p.waitDrained(t, it)
	p.assertInvariants(t, it)
}

// testIdempotencyKeyOnPayAndCancel: the key's first answer comes again (on
// another replica too), reused with another order, user or operation it is
// 422, and while its first request waits on the order's row it is 409
// IDEMPOTENCY_KEY_IN_PROGRESS with Retry-After.
func testIdempotencyKeyOnPayAndCancel(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "relay"}, nil)
	it := stock.Item{ActivityID: 50, ItemID: 1}
	p.mustSale(t, 50, 1, map[int64]int64{1: 5})
	place := func(rid string, user int64) string {
		r := p.order(t, orderBody{RequestID: rid, UserID: user, ActivityID: 50, ItemID: 1, Quantity: 1})
		if r.Status != http.StatusAccepted {
			t.Fatalf("order %s: %d %v", rid, r.Status, r.Body)
		}
		p.waitStatus(t, r.Str("orderNo"), order.StatusUnpaid)
		return r.Str("orderNo")
	}
	a, b, c := place("pk-1", 1), place("pk-2", 2), place("pk-3", 3)
	pay := func(g *pipeline, orderNo, key string) apiResponse {
		return g.do(t, http.MethodPost, "/v1/orders/"+orderNo+"/pay", "", nil, "Idempotency-Key", key)
	}
	cancel := func(g *pipeline, orderNo string, user int64, key string) apiResponse {
		return g.do(t, http.MethodPost, "/v1/orders/"+orderNo+"/cancel", "application/json", map[string]any{"userId": user}, "Idempotency-Key", key)
	}

	if r := pay(p, a, `"pay-a"`); r.Status != http.StatusOK || r.Str("status") != order.StatusPaid || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("pay: %d %v", r.Status, r.Body)
	}
	if r := cancel(p, b, 2, `"cancel-b"`); r.Status != http.StatusOK || r.Str("reason") != order.ReasonCancelled {
		t.Fatalf("cancel: %d %v", r.Status, r.Body)
	}
	// Another payload under a used key changes nothing.
	for name, r := range map[string]apiResponse{
		"PayAnotherOrder":    pay(p, c, `"pay-a"`),
		"CancelWithPayKey":   cancel(p, a, 1, `"pay-a"`),
		"CancelAnotherUser":  cancel(p, b, 9, `"cancel-b"`),
		"CancelAnotherOrder": cancel(p, c, 3, `"cancel-b"`),
	} {
		if r.Status != http.StatusUnprocessableEntity || r.Code() != "IDEMPOTENCY_KEY_REUSED" {
			t.Errorf("%s: %d %v, want 422 IDEMPOTENCY_KEY_REUSED", name, r.Status, r.Body)
		}
	}
	if g := p.do(t, http.MethodGet, "/v1/orders/"+c, "", nil); g.Str("status") != order.StatusUnpaid {
		t.Errorf("order %s after the refused reuses: %v, want UNPAID", c, g.Body)
	}
	// The first answers again, on this gateway and on another replica.
	for name, g := range map[string]*pipeline{"SameGateway": p, "OtherGateway": startGateway(t, p.Cfg)} {
		if r := pay(g, a, "pay-a"); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" || r.Str("orderNo") != a {
			t.Errorf("%s: pay again (bare key): %d %v %v, want the first 200 replayed", name, r.Status, r.Body, r.Header)
		}
		if r := cancel(g, b, 2, `"cancel-b"`); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" || r.Str("reason") != order.ReasonCancelled {
			t.Errorf("%s: cancel again: %d %v, want the first 200 replayed", name, r.Status, r.Body)
		}
	}

	t.Run("Client", func(t *testing.T) {
		ctx := context.Background()
		if paid, err := p.api().PayRetrying(ctx, a, "pay-a", client.Retry{}); err != nil || paid.Status != order.StatusPaid {
			t.Errorf("PayRetrying with the used key: %+v %v, want its first answer, PAID", paid, err)
		}
		if _, err := p.api().Pay(ctx, c, client.WithIdempotencyKey("pay-a")); !errors.Is(err, client.ErrKeyReused) {
			t.Errorf("Pay of another order with a used key: %v, want ErrKeyReused", err)
		}
	})

	t.Run("InProgress", func(t *testing.T) {
		hold := ordertest.HoldOrderRow(t, p.DB.Pool, c)
		defer hold.Release()
		first := make(chan apiResponse, 1)
		go func() { first <- pay(p, c, `"pay-c"`) }()
		testenv.WaitFor(t, 20*time.Second, "the first pay to wait on the row", hold.Waiting)
		r := pay(p, c, `"pay-c"`)
		if r.Status != http.StatusConflict || r.Code() != "IDEMPOTENCY_KEY_IN_PROGRESS" || r.Header.Get("Retry-After") == "" {
			t.Errorf("pay while the first with the key runs: %d %v, want 409 IDEMPOTENCY_KEY_IN_PROGRESS with Retry-After", r.Status, r.Body)
		}
		hold.Release()
		if f := <-first; f.Status != http.StatusOK {
			t.Fatalf("the first pay: %d %v", f.Status, f.Body)
		}
		if r := pay(p, c, `"pay-c"`); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("pay after the first answered: %d %v, want its 200 replayed", r.Status, r.Body)
		}
	})

	t.Run("BadKey", func(t *testing.T) {
		if r := pay(p, c, `"a b"`); r.Status != http.StatusBadRequest {
			t.Errorf("pay with a bad key: %d %v, want 400", r.Status, r.Body)
		}
	})
	p.waitDrained(t, it)
	p.assertInvariants(t, it)
}

// testCloserNeverClosesBeforePayBy: the closer races a pay sent a few
// milliseconds before the order's payBy, and the pay wins; an order left
// unpaid is closed, but not before its payBy. CLOSE_AFTER is 2 s and the
// closer checks every 10 ms, with the shipped CLOSE_GRACE.
func testCloserNeverClosesBeforePayBy(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "closer"}, func(c *config) {
		c.Closer.CloseAfter = 2 * time.Second
		c.Closer.Interval = 10 * time.Millisecond
	})
	if p.Cfg.Closer.Grace != order.CloseGraceVar.Duration() {
		t.Fatalf("CLOSE_GRACE %s, want the default %s", p.Cfg.Closer.Grace, order.CloseGraceVar.Default)
	}
	it := stock.Item{ActivityID: 51, ItemID: 1}
	p.mustSale(t, 51, 1, map[int64]int64{1: 5})
	placed := map[string]time.Time{}
	var paid, left string
	for i, rid := range []string{"pb-paid", "pb-left"} {
		r := p.order(t, orderBody{RequestID: rid, UserID: int64(i + 1), ActivityID: 51, ItemID: 1, Quantity: 1})
		payBy, err := time.Parse(time.RFC3339Nano, r.Str("payBy"))
		if r.Status != http.StatusAccepted || err != nil {
			t.Fatalf("order %s: %d %v (payBy: %v)", rid, r.Status, r.Body, err)
		}
		placed[r.Str("orderNo")] = payBy
		if i == 0 {
			paid = r.Str("orderNo")
		} else {
			left = r.Str("orderNo")
		}
	}
	// Until a few milliseconds before its payBy the order stays UNPAID.
	payAt := placed[paid].Add(-3 * time.Millisecond)
	for time.Until(payAt) > 50*time.Millisecond {
		if g := p.do(t, http.MethodGet, "/v1/orders/"+paid, "", nil); g.Str("status") != order.StatusUnpaid && g.Str("status") != order.StatusPending {
			t.Fatalf("%s is %s %s before its payBy %s", paid, g.Str("status"), time.Until(placed[paid]), placed[paid])
		}
	}
	// The race itself is against the instant: the pay goes at payBy - 3 ms.
	<-time.After(time.Until(payAt))
	r := p.do(t, http.MethodPost, "/v1/orders/"+paid+"/pay", "", nil)
	if r.Status != http.StatusOK || r.Str("status") != order.StatusPaid {
		t.Fatalf("pay %s before payBy: %d %v, want 200 PAID (the closer must not have closed it)", time.Until(placed[paid]), r.Status, r.Body)
	}
	closed := p.waitStatus(t, left, order.StatusClosed)
	if closed.ClosedAt == nil || !closed.ClosedAt.After(placed[left]) {
		t.Errorf("the unpaid order closed at %v, its payBy %s: never before", closed.ClosedAt, placed[left])
	}
	if g := p.do(t, http.MethodGet, "/v1/orders/"+paid, "", nil); g.Str("status") != order.StatusPaid || g.Body["payBy"] != nil {
		t.Errorf("the paid order: %v, want PAID without payBy", g.Body)
	}
	p.waitDrained(t, it)
	p.assertInvariants(t, it)
}
