package event_test

import (
	"context"
	"testing"
	"time"

	"orderpipe/pkg/event"
	"orderpipe/pkg/testenv"
)

// TestPingBoundedByItsContext: a "broker" that accepts connections and never
// answers costs a ping its context's time, whether the context times out or
// is cancelled, never a hang.
func TestPingBoundedByItsContext(t *testing.T) {
	t.Parallel()
	brokers := []string{testenv.SilentServer(t)}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := event.Ping(ctx, brokers); err == nil {
		t.Fatal("a silent broker answered the ping")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("a ping with a 300 ms context took %s", took)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start = time.Now()
	if err := event.Ping(ctx, brokers); err == nil {
		t.Fatal("a silent broker answered the ping")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("a ping cancelled after 300 ms took %s", took)
	}
}
