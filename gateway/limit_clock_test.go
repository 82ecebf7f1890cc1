//go:build dev

package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/clock"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// TestUserLimitIgnoresAClockStep: the wall clock stepped back an hour (the
// dev clock offset, as NTP or an operator would step it) must not refuse a
// user for that hour; the user is let through again at the normal rate.
// Not parallel: the offset is the whole process's clock.
func TestUserLimitIgnoresAClockStep(t *testing.T) {
	r := testenv.MustRedis(t)
	st := stock.New(r.Client, r.Prefix)
	it := stock.Item{ActivityID: 1, ItemID: 1}
	ctx := context.Background()
	if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: 1000, StartsAt: time.Now().Add(-3 * time.Hour),
		EndsAt: time.Now().Add(3 * time.Hour), Cap: 1000}); err != nil {
		t.Fatal(err)
	}
	s := New(Config{UserRPS: 20, UserBurst: 1}, Deps{Stock: st, Producer: nopProducer{}, Metrics: telemetry.NewMetrics(),
		Log: slog.New(slog.DiscardHandler)})
	n := 0
	order := func() int {
		n++
		req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(
			fmt.Sprintf(`{"requestId":"r%d","userId":7,"activityId":1,"itemId":1,"quantity":1}`, n)))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w.Code
	}
	if code := order(); code != http.StatusAccepted {
		t.Fatalf("first order answered %d, want 202", code)
	}

	path := filepath.Join(t.TempDir(), "clock")
	if err := os.WriteFile(path, []byte("-1h"), 0o644); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() {
		os.Remove(path)
		testenv.WaitFor(t, 10*time.Second, "the clock to step back to the real time", func() bool { return clock.Offset() == 0 })
		cancel()
	})
	if err := clock.Watch(wctx, path, 10*time.Millisecond, func(time.Duration, time.Duration, error) {}); err != nil {
		t.Fatal(err)
	}
	if clock.Offset() != -time.Hour {
		t.Fatalf("clock offset %s, want -1h", clock.Offset())
	}
	// At 20 per second the next token comes within 50 ms; an hour's refusal
	// would keep answering 429 past the deadline.
	testenv.WaitFor(t, 10*time.Second, "the user's next order to pass the limiter after the clock stepped back", func() bool {
		return order() != http.StatusTooManyRequests
	})
}
