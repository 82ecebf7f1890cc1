package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"orderpipe/gateway/client"
)

func TestSchedule(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	t.Run("Intended", func(t *testing.T) {
		for _, tt := range []struct {
			rate float64
			i    int
			want time.Duration
		}{{1000, 0, 0}, {1000, 1, time.Millisecond}, {1000, 2500, 2500 * time.Millisecond}, {3, 1, 333333333}, {4000, 3, 750 * time.Microsecond}} {
			if got := intended(start, tt.i, tt.rate).Sub(start); got != tt.want {
				t.Errorf("intended(%d at %v/s) = +%v, want +%v", tt.i, tt.rate, got, tt.want)
			}
		}
	})
	t.Run("DueByAgreesWithIntended", func(t *testing.T) {
		// dueBy(now) must be exactly the count of i with intended(i) ≤ now,
		// at the boundaries too (float rounding of i/rate).
		for _, rate := range []float64{1, 3, 7, 1000, 2048, 3333, 4000, 12345.6} {
			const n = 5000
			for _, i := range []int{0, 1, 2, 3, 99, 100, 101, 1234, n - 2, n - 1} {
				at := intended(start, i, rate)
				for _, now := range []time.Time{at.Add(-time.Nanosecond), at, at.Add(time.Nanosecond)} {
					want := 0
					for j := range n {
						if !intended(start, j, rate).After(now) {
							want++
						}
					}
					if got := dueBy(start, now, rate, n); got != want {
						t.Fatalf("rate %v: dueBy(+%v) = %d, want %d", rate, now.Sub(start), got, want)
					}
				}
			}
		}
		if got := dueBy(start, start.Add(-time.Second), 1000, 10); got != 0 {
			t.Errorf("before the start: %d due, want 0", got)
		}
		if got := dueBy(start, start.Add(time.Hour), 1000, 10); got != 10 {
			t.Errorf("long after the end: %d due, want all 10", got)
		}
	})
}

func TestLatencyOf(t *testing.T) {
	t.Parallel()
	lat := make([]time.Duration, 2000)
	for i := range lat {
		// Shuffled on purpose: latencyOf sorts.
		lat[i] = time.Duration((i*7919)%2000+1) * time.Millisecond
	}
	got := latencyOf(lat)
	want := Latency{P50: 1000, P90: 1800, P95: 1900, P99: 1980, P999: 1998, Max: 2000, Mean: 1000.5}
	if got != want {
		t.Errorf("latencyOf = %+v, want %+v", got, want)
	}
	if (latencyOf(nil) != Latency{}) {
		t.Error("latencyOf(nil) is not zero")
	}
	// One request in a thousand stalled: P99.9 shows it, P99 does not.
	lat = make([]time.Duration, 1000)
	for i := range lat {
		lat[i] = time.Millisecond
	}
	lat[500], lat[501] = time.Second, time.Second
	if got := latencyOf(lat); got.P99 != 1 || got.P999 != 1000 || got.Max != 1000 {
		t.Errorf("two stalls in 1000: %+v, want P99 1 ms, P99.9 and max 1000 ms", got)
	}
}

// MustServeFloor starts the trivial handler answering every order with
// status (ServeFloorStatus) on a free port and returns its base URL; it
// stops with the test.
func MustServeFloor(tb testing.TB, status int) string {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() { errc <- ServeFloorStatus(ctx, "127.0.0.1:0", status, func(a net.Addr) { addrc <- a }) }()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-errc:
		tb.Fatalf("ServeFloorStatus: %v", err)
	}
	tb.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			tb.Errorf("ServeFloorStatus after shutdown: %v", err)
		}
	})
	return "http://" + addr.String()
}

// mustPostOrder posts one order to base and returns the answer, its body
// read.
func mustPostOrder(tb testing.TB, base string) (*http.Response, []byte) {
	tb.Helper()
	res, err := http.Post(base+"/v1/orders", "application/json",
		strings.NewReader(`{"requestId":"r1","userId":1,"activityId":1,"itemId":1,"quantity":1}`))
	if err != nil {
		tb.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, raw
}

func TestFloorServer(t *testing.T) {
	t.Parallel()
	base := MustServeFloor(t, http.StatusAccepted)
	res, raw := mustPostOrder(t, base)
	a, err := client.ReadPlaced(res.StatusCode, "", raw)
	if err != nil || res.Header.Get("Content-Type") != "application/json" || a.HTTPStatus != http.StatusAccepted {
		t.Errorf("POST /v1/orders: %d %q %s, want a JSON 202 with an orderNo", res.StatusCode, res.Header.Get("Content-Type"), raw)
	}
	res, err = http.Get(base + "/v1/orders")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/orders: %d, want 405", res.StatusCode)
	}
	if err := ServeFloor(context.Background(), strings.TrimPrefix(base, "http://"), nil); err == nil {
		t.Error("ServeFloor on a taken address: no error")
	}
}

func TestDriveOpen(t *testing.T) {
	t.Parallel()
	work := plan(Config{Concurrency: 4, Requests: 300, Items: 1, Quantity: 1, ActivityID: 1, Seed: 1}, []int64{1})
	cfg := Config{Concurrency: 8, Rate: 3000, Timeout: 5 * time.Second}
	t.Run("EveryRequestAnswered", func(t *testing.T) {
		base := MustServeFloor(t, http.StatusAccepted)
		answers, st, err := driveOpen(context.Background(), nil, base, cfg, work, nil)
		if err != nil {
			t.Fatal(err)
		}
		a := newArrival(base, answers, st)
		if a.Requests != len(work) || a.Answered != len(work) || a.Status["202"] != len(work) {
			t.Errorf("arrival %+v, want all %d answered 202", a, len(work))
		}
		if a.Latency.P50 <= 0 || a.Latency.P50 > a.Latency.P99 || a.Latency.P99 > a.Latency.P999 || a.Latency.P999 > a.Latency.Max {
			t.Errorf("latency %+v is not ordered", a.Latency)
		}
	})
	t.Run("StallIsChargedToTheRequestsDueMeanwhile", func(t *testing.T) {
		// One connection, and the server holds the first request: the
		// requests due meanwhile cannot be sent on time. Measured from
		// their intended times, each later request k has latency ≥ the
		// first's − k/rate (it ends after the first); a closed loop would
		// show them as fast as the server answers once freed.
		const hold = 50 * time.Millisecond
		first := work[0].id
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), fmt.Sprintf("%q", first)) {
				time.Sleep(hold) // the stall this test is about, not a wait for a result
			}
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(`{}`)) //nolint:errcheck
		})}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln) //nolint:errcheck
		t.Cleanup(func() { srv.Close() })
		small := Config{Concurrency: 1, Rate: 1000, Timeout: 5 * time.Second}
		answers, st, err := driveOpen(context.Background(), nil, "http://"+ln.Addr().String(), small, work[:20], nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.late < 1 {
			t.Errorf("late = %d, want ≥ 1: requests were due while the only connection waited", st.late)
		}
		if answers[0].latency < hold {
			t.Errorf("the held request's latency %v < the hold %v", answers[0].latency, hold)
		}
		for k := 1; k < 20; k++ {
			if lb := answers[0].latency - time.Duration(k)*time.Millisecond; answers[k].latency < lb {
				t.Errorf("request %d: latency %v, want ≥ %v (it was due %d ms after the held one and answered after it)",
					k, answers[k].latency, lb, k)
			}
			if answers[k].status != http.StatusAccepted {
				t.Errorf("request %d: status %d", k, answers[k].status)
			}
		}
	})
}

// TestFloorServerRefuses: with status 409 the trivial handler answers what
// the gateway answers a sold-out sale, so the flood's floor is a refusal
// the client reads as SOLD_OUT; any other status than 202 or 409 is refused.
func TestFloorServerRefuses(t *testing.T) {
	t.Parallel()
	res, raw := mustPostOrder(t, MustServeFloor(t, http.StatusConflict))
	a := answerOf(res.StatusCode, raw, time.Millisecond)
	if a.status != http.StatusConflict || a.code != "SOLD_OUT" || !refused(a) {
		t.Errorf("POST /v1/orders: %d %s (code %q), want a 409 SOLD_OUT refusal", res.StatusCode, raw, a.code)
	}
	if err := ServeFloorStatus(context.Background(), "127.0.0.1:0", http.StatusInternalServerError, nil); err == nil ||
		!strings.Contains(err.Error(), "want 202 or 409") {
		t.Errorf("status 500: %v, want an error", err)
	}
}
