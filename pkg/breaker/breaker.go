// Package breaker wraps sony/gobreaker with the pipeline's policy: trip
// after consecutive failures or a high failure ratio, stay open for a while,
// then let one probe through (half-open). It exports its state as a metric.
// It never retries: callers decide whether to fail closed or back off.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// ErrOpen is returned without calling the dependency while the breaker is
// open (or half-open and already probing).
var ErrOpen = errors.New("circuit breaker open")

// Settings tune a breaker; zero values take the defaults.
type Settings struct {
	// OpenFor is how long the breaker stays open before probing (default 2s).
	OpenFor time.Duration
	// ConsecutiveFailures trips the breaker (default 5).
	ConsecutiveFailures uint32
}

// Breaker guards calls to one dependency.
type Breaker struct {
	cb *gobreaker.CircuitBreaker[struct{}]
}

// New returns a breaker named name whose state is reported on gauge (labels:
// name), 0 closed, 1 half-open, 2 open. gauge may be nil.
func New(name string, s Settings, gauge *prometheus.GaugeVec) *Breaker {
	if s.OpenFor <= 0 {
		s.OpenFor = OpenForVar.Duration()
	}
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = 5
	}
	if gauge != nil {
		gauge.WithLabelValues(name).Set(0)
	}
	cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,
		Interval:    10 * time.Second,
		Timeout:     s.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= s.ConsecutiveFailures ||
				(c.Requests >= 20 && c.TotalFailures*2 >= c.Requests)
		},
		OnStateChange: func(name string, _, to gobreaker.State) {
			if gauge != nil {
				gauge.WithLabelValues(name).Set(float64(to))
			}
		},
		// A caller that gave up is not the dependency's fault.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
	})
	return &Breaker{cb: cb}
}

// Do runs fn unless the breaker is open.
func (b *Breaker) Do(fn func() error) error {
	_, err := b.cb.Execute(func() (struct{}, error) { return struct{}{}, fn() })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return fmt.Errorf("%s: %w", b.cb.Name(), ErrOpen)
	}
	return err
}

// Open reports whether calls are currently refused.
func (b *Breaker) Open() bool { return b.cb.State() == gobreaker.StateOpen }

// State is "closed", "half-open" or "open".
func (b *Breaker) State() string { return b.cb.State().String() }
