package order_test

import (
	"context"
	"testing"
	"time"
)

// TestEndActivityIsOffByTheDatabasesClock: the kill switch's end is never
// after the database's now, so SaleNow (which reads that clock) says the
// sale is off at once, even when the caller's clock runs ahead of it; and a
// repeat never moves the end later.
func TestEndActivityIsOffByTheDatabasesClock(t *testing.T) {
	t.Parallel()
	s := mustStore(t)
	ctx := context.Background()
	if err := s.MarkPreheated(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	if on, _, _, err := s.SaleNow(ctx, 1, 10); err != nil || !on {
		t.Fatalf("before the kill switch: on sale %v, %v", on, err)
	}
	ahead := time.Now().Add(10 * time.Minute) // a gateway whose clock runs ahead
	a, err := s.EndActivity(ctx, 1, ahead)
	if err != nil {
		t.Fatal(err)
	}
	if !a.EndsAt.Before(ahead) || a.EndsAt.After(time.Now().Add(time.Second)) {
		t.Errorf("ends at %v; want the database's now, not the caller's %v", a.EndsAt, ahead)
	}
	if on, _, _, err := s.SaleNow(ctx, 1, 10); err != nil || on {
		t.Errorf("after the kill switch: on sale %v, %v", on, err)
	}
	again, err := s.EndActivity(ctx, 1, ahead.Add(time.Hour))
	if err != nil || !again.EndsAt.Equal(a.EndsAt) {
		t.Errorf("a repeat ends at %v (%v); want the first end %v", again.EndsAt, err, a.EndsAt)
	}
}
