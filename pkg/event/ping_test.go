package event_test

import (
	"context"
	"net"
	"testing"
	"time"

	"orderpipe/pkg/event"
)

// TestPingBoundedByItsContext: a "broker" that accepts connections and never
// answers costs a ping its context's time, whether the context times out or
// is cancelled, never a hang.
func TestPingBoundedByItsContext(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	brokers := []string{ln.Addr().String()}

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
