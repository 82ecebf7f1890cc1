package tick

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestEveryWaitsThenRepeatsUntilCancelled: no pass runs before the first
// interval, passes repeat after it, and Every returns once ctx ends.
func TestEveryWaitsThenRepeatsUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var passes atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Hour, func() { passes.Add(1) })
	}()
	time.Sleep(20 * time.Millisecond)
	if n := passes.Load(); n != 0 {
		t.Fatalf("%d passes before the first interval, want 0", n)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Every did not return after ctx ended")
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	enough := make(chan struct{})
	go Every(ctx, time.Millisecond, func() {
		if passes.Add(1) == 3 {
			close(enough)
		}
	})
	select {
	case <-enough:
	case <-time.After(5 * time.Second):
		t.Fatalf("%d passes in 5s at a 1ms interval, want 3", passes.Load())
	}
}
