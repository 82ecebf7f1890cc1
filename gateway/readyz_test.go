package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"orderpipe/pkg/event"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// TestReadyzNamesTheDependencyDown: /readyz answers 503 naming the check
// that failed (and only that one), never the address behind it, and 200
// again once the dependency is back (each seen once the last answer is
// readyFor old).
func TestReadyzNamesTheDependencyDown(t *testing.T) {
	t.Parallel()
	proxy := testenv.MustProxy(t, testenv.RedisAddr())
	st := stock.New(testenv.RedisClient(t, proxy.Addr, time.Second), "")
	k := testenv.MustKafka(t)
	s := New(Config{}, Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler),
		Ready: map[string]PingFunc{
			"redis": st.Ping,
			"kafka": func(ctx context.Context) error { return event.Ping(ctx, k.Brokers) },
		}})
	var mu sync.Mutex
	now := time.Now()
	s.monoNow = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	expire := func() { mu.Lock(); now = now.Add(readyFor); mu.Unlock() }
	type answer struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	probe := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return w
	}
	readyz := func(t *testing.T, wantCode int, wantChecks map[string]string) {
		t.Helper()
		w := probe()
		var got answer
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("readyz body %q: %v", w.Body, err)
		}
		wantStatus := map[int]string{http.StatusOK: "ok", http.StatusServiceUnavailable: "unavailable"}[wantCode]
		if w.Code != wantCode || got.Status != wantStatus || len(got.Checks) != len(wantChecks) {
			t.Fatalf("readyz %d %s, want %d with checks %v", w.Code, w.Body, wantCode, wantChecks)
		}
		for name, want := range wantChecks {
			if got.Checks[name] != want {
				t.Errorf("readyz check %s = %q, want %q (body %s)", name, got.Checks[name], want, w.Body)
			}
		}
		if wantCode != http.StatusOK && w.Header().Get("Retry-After") == "" {
			t.Error("503 without Retry-After")
		}
		for _, addr := range append([]string{proxy.Addr}, k.Brokers...) {
			if strings.Contains(w.Body.String(), addr) {
				t.Errorf("the unauthenticated probe shows an address: %s", w.Body)
			}
		}
	}

	t.Run("AllUp", func(t *testing.T) {
		readyz(t, http.StatusOK, map[string]string{"redis": "ok", "kafka": "ok"})
	})
	t.Run("RedisDown", func(t *testing.T) {
		proxy.Down()
		expire()
		readyz(t, http.StatusServiceUnavailable, map[string]string{"redis": "unavailable", "kafka": "ok"})
		proxy.Up(t)
		testenv.WaitFor(t, 10*time.Second, "readyz 200 once redis is back", func() bool {
			expire()
			return probe().Code == http.StatusOK
		})
		readyz(t, http.StatusOK, map[string]string{"redis": "ok", "kafka": "ok"})
	})
	t.Run("KafkaDown", func(t *testing.T) {
		if k.Cluster == nil {
			t.Skip("needs the in-process broker to stop it")
		}
		k.Cluster.Close()
		expire()
		readyz(t, http.StatusServiceUnavailable, map[string]string{"redis": "ok", "kafka": "unavailable"})
	})
}

// TestReadyzFloodCostsOneProbe: a flood of concurrent probes costs one
// broker dial and one Redis PING per readyFor, counted where they land (a
// proxy in front of the broker, a private Redis's command stats); a
// dependency that goes down is seen by the first probe after readyFor.
func TestReadyzFloodCostsOneProbe(t *testing.T) {
	t.Parallel()
	k := testenv.MustKafka(t)
	broker := testenv.MustProxy(t, k.Brokers[0])
	rs := testenv.MustRedisServer(t)
	st := stock.New(testenv.RedisClient(t, rs.Addr, time.Second), "")
	s := New(Config{}, Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler),
		Ready: map[string]PingFunc{
			"redis": st.Ping,
			"kafka": func(ctx context.Context) error { return event.Ping(ctx, []string{broker.Addr}) },
		}})
	var mu sync.Mutex
	now := time.Now()
	s.monoNow = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	pings := func() int64 { return rs.CommandCalls(t, "ping") }

	flood := func(n int) map[int]int {
		codes := map[int]int{}
		var cmu sync.Mutex
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := httptest.NewRecorder()
				s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
				cmu.Lock()
				codes[w.Code]++
				cmu.Unlock()
			}()
		}
		wg.Wait()
		return codes
	}
	const n = 64
	pings0 := pings()
	if codes := flood(n); codes[http.StatusOK] != n {
		t.Fatalf("flood answers %v, want %d × 200", codes, n)
	}
	if d, p := broker.Dials(), pings()-pings0; d != 1 || p != 1 {
		t.Fatalf("%d probes cost %d broker dials and %d Redis PINGs, want 1 and 1", n, d, p)
	}

	// Redis goes down: the answer of the last probe stands until readyFor
	// has passed, and the next probe sees it.
	rs.Stop()
	if codes := flood(8); codes[http.StatusOK] != 8 {
		t.Fatalf("within readyFor of the last probe: %v, want the reused 200s", codes)
	}
	advance(readyFor)
	if codes := flood(n); codes[http.StatusServiceUnavailable] != n {
		t.Fatalf("after readyFor with Redis down: %v, want %d × 503", codes, n)
	}
	if d := broker.Dials(); d != 2 {
		t.Fatalf("two periods of probes cost %d broker dials, want 2", d)
	}
}
