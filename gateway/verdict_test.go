package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// replica is one gateway on a real HTTP server, its caches aged by a
// clock the test steps.
type replica struct {
	s   *Server
	srv *httptest.Server
	mu  sync.Mutex
	now time.Time
}

func mustReplica(t *testing.T, st *stock.Store, ttl time.Duration) *replica {
	t.Helper()
	g := &replica{now: time.Now()}
	g.s = New(Config{VerdictTTL: ttl}, Deps{Stock: st, Producer: okProducer{}, Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	g.s.monoNow = func() time.Time { g.mu.Lock(); defer g.mu.Unlock(); return g.now }
	g.srv = httptest.NewServer(g.s.Handler())
	t.Cleanup(g.srv.Close)
	return g
}

// mustCountedStock is a stock store on a key prefix of its own, with the
// scripts it runs counted.
func mustCountedStock(tb testing.TB) (*stock.Store, *stocktest.ScriptCalls) {
	tb.Helper()
	r := testenv.MustRedis(tb)
	return stock.New(r.Client, r.Prefix), stocktest.CountScripts(stocktest.On(r.Client, r.Prefix))
}

func (g *replica) step(d time.Duration) { g.mu.Lock(); g.now = g.now.Add(d); g.mu.Unlock() }

// post sends an order of one unit and returns the status, the error code and the orderNo.
func (g *replica) post(t *testing.T, it stock.Item, requestID string, user int64) (int, string, string) {
	t.Helper()
	res, err := g.srv.Client().Post(g.srv.URL+"/v1/orders", "application/json", strings.NewReader(fmt.Sprintf(
		`{"requestId":%q,"userId":%d,"activityId":%d,"itemId":%d,"quantity":1}`, requestID, user, it.ActivityID, it.ItemID)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		OrderNo string
		Error   struct{ Code string }
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatalf("decoding the answer to %s: %v", requestID, err)
	}
	return res.StatusCode, body.Error.Code, body.OrderNo
}

func (g *replica) fromVerdict(code string) float64 {
	return testutil.ToFloat64(g.s.deps.Metrics.VerdictRefusals.WithLabelValues(code))
}

// TestSoldOutFloodRunsNoScript: once Redis has said an item is sold out, two
// gateways sharing it refuse fresh buyers without the reserve script; a
// retry of an accepted requestId still replays its 202 and a reused one is
// still 422 on either gateway; units given back are on sale again on both
// once the verdict's life (VERDICT_TTL) has passed, without any message.
func TestSoldOutFloodRunsNoScript(t *testing.T) {
	t.Parallel()
	st, scripts := mustCountedStock(t)
	it := stock.Item{ActivityID: 46, ItemID: 1}
	ctx := context.Background()
	if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: 2, StartsAt: time.Now().Add(-time.Hour),
		EndsAt: time.Now().Add(time.Hour), Cap: 1}); err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	a, b := mustReplica(t, st, ttl), mustReplica(t, st, ttl)
	accepted := map[string]string{}
	for i, g := range []*replica{a, b} {
		id := fmt.Sprintf("first-%d", i)
		code, _, no := g.post(t, it, id, int64(100+i))
		if code != http.StatusAccepted {
			t.Fatalf("%s: %d, want 202", id, code)
		}
		accepted[id] = no
	}
	// a sold the first unit (2 left → 1), b the last: b knows it is sold
	// out; a learns it from its first refusal.
	if code, errCode, _ := a.post(t, it, "learn", 200); code != http.StatusConflict || errCode != "SOLD_OUT" {
		t.Fatalf("a's first refusal: %d %s, want 409 SOLD_OUT", code, errCode)
	}
	before := scripts.N()
	const flood = 25
	for i := range flood {
		for j, g := range []*replica{a, b} {
			if code, errCode, _ := g.post(t, it, fmt.Sprintf("fresh-%d-%d", j, i), int64(1000+2*i+j)); code != http.StatusConflict || errCode != "SOLD_OUT" {
				t.Fatalf("fresh buyer: %d %s, want 409 SOLD_OUT", code, errCode)
			}
		}
	}
	if n := scripts.N() - before; n != 0 {
		t.Errorf("the sold-out flood ran %d scripts, want none", n)
	}
	if got := a.fromVerdict("SOLD_OUT") + b.fromVerdict("SOLD_OUT"); got != 2*flood {
		t.Errorf("refusals from the verdict: %v, want %d", got, 2*flood)
	}

	// A retry of an accepted requestId, on the other gateway: its first answer.
	for i, g := range []*replica{b, a} {
		id := fmt.Sprintf("first-%d", i)
		code, _, no := g.post(t, it, id, int64(100+i))
		if code != http.StatusOK || no != accepted[id] {
			t.Errorf("retry of %s: %d %s, want 200 replaying %s", id, code, no, accepted[id])
		}
		if code, errCode, _ := g.post(t, it, id, 999); code != http.StatusUnprocessableEntity || errCode != "IDEMPOTENCY_KEY_REUSED" {
			t.Errorf("%s reused for another user: %d %s, want 422 IDEMPOTENCY_KEY_REUSED", id, code, errCode)
		}
	}

	// Both units given back (as a cancel's compensation does).
	for i := range 2 {
		id := fmt.Sprintf("first-%d", i)
		if out, err := st.Release(ctx, stock.Compensation, stock.Release{Item: it, Ref: stock.Ref{RequestID: id, OrderNo: accepted[id]},
			UserID: int64(100 + i), Quantity: 1}); err != nil || out != stock.Released {
			t.Fatalf("giving %s back: %v %v", id, out, err)
		}
	}
	// Once the verdicts' life has passed, each gateway sells again.
	a.step(ttl)
	b.step(ttl)
	for i, g := range []*replica{a, b} {
		if code, errCode, _ := g.post(t, it, fmt.Sprintf("again-%d", i), int64(5000+i)); code != http.StatusAccepted {
			t.Errorf("gateway %d after the given-back units: %d %s, want 202", i, code, errCode)
		}
	}
}

// TestKillSwitchActsAtOnceBesideVerdicts: only refusals are kept, so an
// item still on sale is ended by the kill switch at the next request.
func TestKillSwitchActsAtOnceBesideVerdicts(t *testing.T) {
	t.Parallel()
	r := testenv.MustRedis(t)
	st := stock.New(r.Client, r.Prefix)
	it := stock.Item{ActivityID: 46, ItemID: 2}
	ctx := context.Background()
	sale := stock.Sale{Item: it, Stock: 10, StartsAt: time.Now().Add(-time.Hour), EndsAt: time.Now().Add(time.Hour), Cap: 1}
	if _, err := st.Preheat(ctx, sale); err != nil {
		t.Fatal(err)
	}
	g := mustReplica(t, st, time.Second)
	if code, _, _ := g.post(t, it, "k1", 1); code != http.StatusAccepted {
		t.Fatalf("before the end: %d, want 202", code)
	}
	if _, _, err := st.End(ctx, []stock.Sale{sale}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, errCode, _ := g.post(t, it, "k2", 2); code != http.StatusNotFound || errCode != "NOT_ON_SALE" {
		t.Fatalf("after the end: %d %s, want 404 NOT_ON_SALE", code, errCode)
	}

	t.Run("SoldOutVerdict", func(t *testing.T) {
		// A sold-out item whose verdict both replicas hold: after the end
		// each answers NOT_ON_SALE at its next request, not the SOLD_OUT it
		// kept.
		it := stock.Item{ActivityID: 46, ItemID: 4}
		sale := stock.Sale{Item: it, Stock: 1, StartsAt: time.Now().Add(-time.Hour), EndsAt: time.Now().Add(time.Hour), Cap: 1}
		if _, err := st.Preheat(ctx, sale); err != nil {
			t.Fatal(err)
		}
		a, b := mustReplica(t, st, time.Second), mustReplica(t, st, time.Second)
		if code, _, _ := a.post(t, it, "s1", 1); code != http.StatusAccepted {
			t.Fatalf("the last unit: %d, want 202", code)
		}
		for i, g := range []*replica{a, b} {
			for j := range 2 {
				if code, errCode, _ := g.post(t, it, fmt.Sprintf("so-%d-%d", i, j), int64(100+10*i+j)); code != http.StatusConflict || errCode != "SOLD_OUT" {
					t.Fatalf("sold out: %d %s, want 409 SOLD_OUT", code, errCode)
				}
			}
		}
		if a.fromVerdict("SOLD_OUT") == 0 || b.fromVerdict("SOLD_OUT") == 0 {
			t.Fatalf("no SOLD_OUT verdict held (%v, %v): the check below would prove nothing", a.fromVerdict("SOLD_OUT"), b.fromVerdict("SOLD_OUT"))
		}
		if _, _, err := st.End(ctx, []stock.Sale{sale}, time.Now()); err != nil {
			t.Fatal(err)
		}
		for i, g := range []*replica{a, b} {
			if code, errCode, _ := g.post(t, it, fmt.Sprintf("after-%d", i), int64(200+i)); code != http.StatusNotFound || errCode != "NOT_ON_SALE" {
				t.Errorf("replica %d after the end, with a SOLD_OUT verdict: %d %s, want 404 NOT_ON_SALE", i, code, errCode)
			}
		}
	})
}

// TestNotYetOpenFloodIsRefusedFromVerdict: before the start a flood is
// refused from the verdict, which lives no longer than the time Redis said
// was left before the start (not the whole TTL), and the sale sells once
// its window opens.
func TestNotYetOpenFloodIsRefusedFromVerdict(t *testing.T) {
	t.Parallel()
	st, scripts := mustCountedStock(t)
	it := stock.Item{ActivityID: 46, ItemID: 3}
	// The verdict's life is capped by the time left before the start only
	// when that is shorter than VERDICT_TTL (1 s here), so the sale opens
	// soon, in Redis's real time: on a machine too busy to send the early
	// flood before then, the case starts again with a later start.
	g := mustReplica(t, st, time.Second)
	opensIn := 300 * time.Millisecond
	for {
		preheated := time.Now()
		if _, err := st.Preheat(context.Background(), stock.Sale{Item: it, Stock: 10, StartsAt: preheated.Add(opensIn),
			EndsAt: preheated.Add(time.Hour), Cap: 1}); err != nil {
			t.Fatal(err)
		}
		code, errCode, _ := g.post(t, it, fmt.Sprintf("first-%d", it.ItemID), 1)
		if code == http.StatusNotFound && errCode == "NOT_ON_SALE" {
			break // the gateway's clock stands still from here on (g.step moves it)
		}
		if code != http.StatusNotFound && time.Since(preheated) < opensIn || opensIn >= 900*time.Millisecond {
			t.Fatalf("before the start: %d %s, want 404 NOT_ON_SALE", code, errCode)
		}
		it.ItemID++
		opensIn += 300 * time.Millisecond
	}
	before := scripts.N()
	for i := range 20 {
		if code, errCode, _ := g.post(t, it, fmt.Sprintf("early-%d", i), int64(10+i)); code != http.StatusNotFound || errCode != "NOT_ON_SALE" {
			t.Fatalf("flood before the start: %d %s, want 404 NOT_ON_SALE", code, errCode)
		}
	}
	if n := scripts.N() - before; n != 0 || g.fromVerdict("NOT_ON_SALE") != 20 {
		t.Errorf("the early flood ran %d scripts and %v refusals came from the verdict, want 0 and 20", n, g.fromVerdict("NOT_ON_SALE"))
	}
	// Past the time left before the start (within the TTL): the script decides again.
	g.step(opensIn)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		before := scripts.N()
		code, errCode, _ := g.post(t, it, fmt.Sprintf("open-%d", i), int64(100+i))
		if code == http.StatusAccepted {
			break
		}
		if code != http.StatusNotFound || time.Now().After(deadline) {
			t.Fatalf("once the window opens: %d %s, want 202 (or 404 until then)", code, errCode)
		}
		if scripts.N() == before {
			t.Fatalf("a request past the start the script named was refused from the verdict")
		}
		g.step(opensIn) // a verdict learned meanwhile lives no longer than what is left
		time.Sleep(10 * time.Millisecond)
	}
}

// TestVerdictRefusesNothingWithRedisDown: a verdict filters, it never
// decides. With Redis cut, a fresh buyer of a sold-out item is not refused
// from the verdict (its requestId cannot be checked): the answer is 503,
// nothing reserved; the failed checks count toward the Redis breaker,
// which opens; once Redis is back the verdict refuses again.
func TestVerdictRefusesNothingWithRedisDown(t *testing.T) {
	t.Parallel()
	r, proxy, st := redisBehindProxy(t)
	it := stock.Item{ActivityID: 47, ItemID: 1}
	if _, err := st.Preheat(context.Background(), stock.Sale{Item: it, Stock: 0, StartsAt: time.Now().Add(-time.Hour),
		EndsAt: time.Now().Add(time.Hour), Cap: 1}); err != nil {
		t.Fatal(err)
	}
	g := mustReplica(t, st, time.Second)
	if code, errCode, _ := g.post(t, it, "learn", 1); code != http.StatusConflict || errCode != "SOLD_OUT" {
		t.Fatalf("first refusal: %d %s, want 409 SOLD_OUT", code, errCode)
	}
	if code, errCode, _ := g.post(t, it, "from-verdict", 2); code != http.StatusConflict || g.fromVerdict("SOLD_OUT") != 1 {
		t.Fatalf("second refusal: %d %s, %v from the verdict; want 409 from it", code, errCode, g.fromVerdict("SOLD_OUT"))
	}
	proxy.Down()
	for i := range 8 {
		if code, errCode, _ := g.post(t, it, fmt.Sprintf("cut-%d", i), int64(10+i)); code != http.StatusServiceUnavailable {
			t.Fatalf("fresh buyer %d with Redis cut: %d %s, want 503", i, code, errCode)
		}
	}
	if g.fromVerdict("SOLD_OUT") != 1 {
		t.Errorf("%v refusals from the verdict, want still 1", g.fromVerdict("SOLD_OUT"))
	}
	if !g.s.redisCB.Open() {
		t.Errorf("the Redis breaker is %s after 8 failed requests, want open", g.s.redisCB.State())
	}
	proxy.Up(t)
	testenv.WaitFor(t, 10*time.Second, "a refusal from the verdict again", func() bool {
		g.step(100 * time.Millisecond) // the breaker's clock is real; the verdict's is this one
		code, _, _ := g.post(t, it, fmt.Sprintf("back-%d", time.Now().UnixNano()), 99)
		return code == http.StatusConflict
	})
	left, err := r.Client.Get(context.Background(), stocktest.KeysOf(stocktest.On(r.Client, r.Prefix), it).Stock).Int64()
	if err != nil || left != 0 {
		t.Errorf("stock %d (%v), want 0: nothing reserved", left, err)
	}
}

// TestBreakerCountsOnlyRedisCalls: a request with no verdict to consult
// makes no call through the Redis breaker, so with Redis cut the failed
// reserves alone are counted, and five of them in a row open it (no
// success of a call that never reached Redis in between).
func TestBreakerCountsOnlyRedisCalls(t *testing.T) {
	t.Parallel()
	_, proxy, st := redisBehindProxy(t)
	it := stock.Item{ActivityID: 48, ItemID: 1}
	preheatTen(t, st, it)
	g := mustReplica(t, st, time.Second)
	if code, errCode, _ := g.post(t, it, "first", 1); code != http.StatusAccepted {
		t.Fatalf("first order: %d %s, want 202", code, errCode)
	}
	proxy.Down()
	for i := range 5 {
		if code, errCode, _ := g.post(t, it, fmt.Sprintf("cut-%d", i), int64(10+i)); code != http.StatusServiceUnavailable {
			t.Fatalf("order %d with Redis cut: %d %s, want 503", i, code, errCode)
		}
	}
	if !g.s.redisCB.Open() {
		t.Errorf("the Redis breaker is %s after 5 failed reserves in a row, want open", g.s.redisCB.State())
	}
}
