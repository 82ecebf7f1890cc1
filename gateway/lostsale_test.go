package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// mustCountedStore is an order store on a fresh database whose every query
// is counted.
func mustCountedStore(tb testing.TB) (*order.Store, *testenv.QueryCounter) {
	tb.Helper()
	pool, q := testenv.MustCountedPool(tb, testenv.MustDatabase(tb).URL, 8)
	return order.NewStore(pool), q
}

// orderRequestFor is a POST /v1/orders for n's ids (a new user each).
func orderRequestFor(activityID, itemID, userID int64) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(fmt.Sprintf(
		`{"requestId":"r-%d-%d-%d","userId":%d,"activityId":%d,"itemId":%d,"quantity":1}`,
		activityID, itemID, userID, userID, activityID, itemID)))
	req.Header.Set("Content-Type", "application/json")
	return req
}

// TestUnknownItemFloodIsBounded: POSTs for random activity and item ids,
// each from another user, reach Postgres (counted at the pool) at most the
// lost-sale check's burst while its budget does not refill, are answered
// 404 NOT_ON_SALE or, over the budget, 503 with nothing reserved, and leave
// the breaker GET and pay share closed (a lookup is still answered).
func TestUnknownItemFloodIsBounded(t *testing.T) {
	t.Parallel()
	orders, queries := mustCountedStore(t)
	r := testenv.MustRedis(t)
	st := stock.New(r.Client, r.Prefix)
	s := New(Config{}, Deps{Stock: st, Orders: orders, Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	var mu sync.Mutex
	now := time.Now()
	s.monoNow = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }

	const n, conc = 600, 16
	codes := map[string]int{}
	var cmu sync.Mutex
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > n {
					return
				}
				w := httptest.NewRecorder()
				s.Handler().ServeHTTP(w, orderRequestFor(1000+i, 7*i, i))
				cmu.Lock()
				codes[fmt.Sprintf("%d %s", w.Code, errorCode(w.Body.String()))]++
				cmu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got := queries.Load(); got > saleChecksPerSecond {
		t.Fatalf("%d POSTs for unknown items cost %d Postgres queries, want at most %d (the check's burst)", n, got, saleChecksPerSecond)
	}
	if codes["404 NOT_ON_SALE"]+codes["503 UNAVAILABLE"] != n || codes["404 NOT_ON_SALE"] == 0 {
		t.Fatalf("answers %v, want only 404 NOT_ON_SALE and 503 UNAVAILABLE, some 404", codes)
	}
	if keys := testenv.Keys(t, r.Client, r.Prefix); len(keys) != 0 {
		t.Fatalf("the flood left Redis keys %v, want none", keys)
	}
	if st := s.pgCB.State(); st != "closed" {
		t.Fatalf("the breaker GET and pay share is %s after the flood, want closed", st)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/orders/1-1-abc", nil))
	if w.Code != http.StatusNotFound || errorCode(w.Body.String()) != "ORDER_NOT_FOUND" {
		t.Fatalf("GET during the flood: %d %s, want 404 ORDER_NOT_FOUND (Postgres asked and answered)", w.Code, w.Body)
	}

	// Once the budget refills, an unknown item is told NOT_ON_SALE again.
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	w = httptest.NewRecorder()
	s.Handler().ServeHTTP(w, orderRequestFor(5, 5, 5))
	if w.Code != http.StatusNotFound || errorCode(w.Body.String()) != "NOT_ON_SALE" {
		t.Fatalf("an unknown item after the flood: %d %s, want 404 NOT_ON_SALE", w.Code, w.Body)
	}
}

// errorCode is the code of an error body, "" for any other.
func errorCode(body string) string {
	_, rest, ok := strings.Cut(body, `"code":"`)
	if !ok {
		return ""
	}
	code, _, _ := strings.Cut(rest, `"`)
	return code
}

// TestMalformedOrderNumbersAreNotFound: GET, pay and cancel of order numbers
// no order can hold (a NUL, bytes that are not UTF-8), sent to a real
// server many times over, are each answered 404 ORDER_NOT_FOUND without a
// Postgres query, and the breaker GET and pay share stays closed. Before,
// Postgres refused such a number (SQLSTATE 22021), the gateway answered 503,
// and five requests opened the breaker for every buyer.
func TestMalformedOrderNumbersAreNotFound(t *testing.T) {
	t.Parallel()
	orders, queries := mustCountedStore(t)
	r := testenv.MustRedis(t)
	s := New(Config{}, Deps{Stock: stock.New(r.Client, r.Prefix), Orders: orders, Metrics: telemetry.NewMetrics(),
		Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	before := queries.Load()
	for _, no := range []string{"1-10-abc%00", "1-10-abc%FF", "1-10-%C3%28", "1-10-abc%0A"} {
		for _, c := range []struct{ method, path, body string }{
			{http.MethodGet, "/v1/orders/" + no, ""},
			{http.MethodPost, "/v1/orders/" + no + "/pay", ""},
			{http.MethodPost, "/v1/orders/" + no + "/cancel", `{"userId":42}`},
		} {
			for range 6 {
				req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
				if err != nil {
					t.Fatal(err)
				}
				if c.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				res, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusNotFound || errorCode(string(body)) != "ORDER_NOT_FOUND" {
					t.Fatalf("%s %s: %d %s, want 404 ORDER_NOT_FOUND", c.method, c.path, res.StatusCode, body)
				}
			}
		}
	}
	if got := queries.Load() - before; got != 0 {
		t.Errorf("malformed order numbers cost %d Postgres queries, want none", got)
	}
	if st := s.pgCB.State(); st != "closed" {
		t.Errorf("the breaker GET and pay share is %s, want closed", st)
	}
}

// TestManyItemActivityIsOneQuery: before its preheat (and after its end) an
// activity of a thousand items is answered 404 NOT_ON_SALE for every item,
// not 503: Postgres is asked about the activity once, not once per item
// (which would overrun the check's budget of saleChecksPerSecond and fail
// closed); a preheated item whose sale Redis lost is still 503.
func TestManyItemActivityIsOneQuery(t *testing.T) {
	t.Parallel()
	orders, queries := mustCountedStore(t)
	r := testenv.MustRedis(t)
	s := New(Config{}, Deps{Stock: stock.New(r.Client, r.Prefix), Orders: orders, Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	var mu sync.Mutex
	now := time.Now()
	s.monoNow = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	const items = 1000
	a := order.Activity{ID: 77, Name: "many", StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour), PerUserLimit: 1}
	for i := int64(1); i <= items; i++ {
		a.Items = append(a.Items, order.ItemStock{ItemID: i, InitialStock: 5})
	}
	ctx := t.Context()
	if err := orders.UpsertActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := orders.MarkPreheated(ctx, 77, 1); err != nil { // as a preheat whose sale Redis then lost
		t.Fatal(err)
	}
	before := queries.Load()
	codes := map[string]int{}
	var other []string // answers other than the expected, for the failure message
	var wg sync.WaitGroup
	var cmu sync.Mutex
	// Fifty callers at once (a busy machine's Redis would time some of a
	// thousand concurrent reserves out: a 503 that is not this test's).
	next := make(chan int64)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				w := httptest.NewRecorder()
				s.Handler().ServeHTTP(w, orderRequestFor(77, i, i))
				cmu.Lock()
				codes[fmt.Sprintf("%d %s", w.Code, errorCode(w.Body.String()))]++
				if (i == 1) != (w.Code == http.StatusServiceUnavailable) && len(other) < 5 {
					other = append(other, fmt.Sprintf("item %d: %d %s", i, w.Code, w.Body))
				}
				cmu.Unlock()
			}
		}()
	}
	for i := int64(1); i <= items; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if codes["404 NOT_ON_SALE"] != items-1 || codes["503 UNAVAILABLE"] != 1 {
		t.Errorf("answers %v, want %d × 404 NOT_ON_SALE and the lost item's 503; e.g. %q", codes, items-1, other)
	}
	if got := queries.Load() - before; got > 2 {
		t.Errorf("%d items of one activity cost %d Postgres queries, want 1 (2 if the memory expired meanwhile)", items, got)
	}
}

// TestLostSaleLogsAreBounded: two hundred preheated items whose sales Redis
// lost are each answered 503, and the gateway's log says so in a handful of
// lines (saleLogsPerSecond), not one per item; the next line counts the
// ones left out.
func TestLostSaleLogsAreBounded(t *testing.T) {
	t.Parallel()
	orders, _ := mustCountedStore(t)
	r := testenv.MustRedis(t)
	var logs testenv.SyncBuffer
	s := New(Config{}, Deps{Stock: stock.New(r.Client, r.Prefix), Orders: orders, Metrics: telemetry.NewMetrics(),
		Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	// The gateway's clock stands still while the 200 are answered, however
	// long a busy machine takes: the bound is per second of that clock.
	var mu sync.Mutex
	now := time.Now()
	s.monoNow = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	const items = 200
	a := order.Activity{ID: 78, Name: "lost", StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour), PerUserLimit: 1}
	for i := int64(1); i <= items; i++ {
		a.Items = append(a.Items, order.ItemStock{ItemID: i, InitialStock: 5})
	}
	ctx := t.Context()
	if err := orders.UpsertActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= items; i++ {
		if err := orders.MarkPreheated(ctx, 78, i); err != nil {
			t.Fatal(err)
		}
	}
	for i := int64(1); i <= items; i++ {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, orderRequestFor(78, i, i))
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("item %d, its sale lost: %d %s, want 503", i, w.Code, w.Body)
		}
	}
	lines := strings.Count(logs.String(), "sale missing in Redis")
	if lines == 0 || lines > saleLogsPerSecond {
		t.Fatalf("%d lost items logged %d lines within a second, want at least one and at most %d", items, lines, saleLogsPerSecond)
	}
	mu.Lock()
	now = now.Add(saleMemory) // the limiter refills; the item memory expires
	mu.Unlock()
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, orderRequestFor(78, 1, 1000))
	if !strings.Contains(logs.String(), `"lines_left_out_before":`) {
		t.Errorf("the line after the limit does not count the ones left out:\n%s", logs.String())
	}
}
