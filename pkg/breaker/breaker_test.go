package breaker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "state"}, []string{"name"})
	b := New("dep", Settings{OpenFor: 50 * time.Millisecond, ConsecutiveFailures: 3}, gauge)
	boom := errors.New("boom")
	calls := 0
	fail := func() error { calls++; return boom }
	for range 3 {
		if err := b.Do(fail); !errors.Is(err, boom) {
			t.Fatalf("closed breaker hid the error: %v", err)
		}
	}
	if !b.Open() || testutil.ToFloat64(gauge.WithLabelValues("dep")) != 2 {
		t.Fatalf("breaker did not open after 3 failures: %s", b.State())
	}
	if err := b.Do(fail); !errors.Is(err, ErrOpen) || calls != 3 {
		t.Fatalf("open breaker called the dependency: err=%v calls=%d", err, calls)
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.State() != "half-open" {
		if time.Now().After(deadline) {
			t.Fatal("breaker never went half-open")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.Do(func() error { return nil }); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if b.State() != "closed" || testutil.ToFloat64(gauge.WithLabelValues("dep")) != 0 {
		t.Fatalf("successful probe left the breaker %s", b.State())
	}
}

func TestCallerCancellationDoesNotTrip(t *testing.T) {
	b := New("dep", Settings{ConsecutiveFailures: 1}, nil)
	for range 5 {
		_ = b.Do(func() error { return context.Canceled })
	}
	if b.Open() {
		t.Fatal("caller cancellations opened the breaker")
	}
}
