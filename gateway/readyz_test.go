package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/event"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// TestReadyzNamesTheDependencyDown: /readyz answers 503 naming the check
// that failed (and only that one), never the address behind it, and 200
// again once the dependency is back.
func TestReadyzNamesTheDependencyDown(t *testing.T) {
	proxy := testenv.MustProxy(t, testenv.RedisAddr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer rdb.Close()
	k := testenv.MustKafka(t)
	s := New(Config{}, Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler),
		Ready: map[string]PingFunc{
			"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
			"kafka": func(ctx context.Context) error { return event.Ping(ctx, k.Brokers) },
		}})
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
		readyz(t, http.StatusServiceUnavailable, map[string]string{"redis": "unavailable", "kafka": "ok"})
		proxy.Up(t)
		testenv.WaitFor(t, 10*time.Second, "readyz 200 once redis is back", func() bool { return probe().Code == http.StatusOK })
		readyz(t, http.StatusOK, map[string]string{"redis": "ok", "kafka": "ok"})
	})
	t.Run("KafkaDown", func(t *testing.T) {
		if k.Cluster == nil {
			t.Skip("needs the in-process broker to stop it")
		}
		k.Cluster.Close()
		readyz(t, http.StatusServiceUnavailable, map[string]string{"redis": "ok", "kafka": "unavailable"})
	})
}
