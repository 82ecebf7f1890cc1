package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"orderpipe/pkg/stock"
	"orderpipe/worker/events"
)

// testEventsCommand: `orderpipe events --order-no` prints an order's
// orders.status events with their versions, in order; a filter that
// matches nothing exits 1.
func testEventsCommand(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "relay"}, nil)
	it := stock.Item{ActivityID: 12, ItemID: 120}
	p.mustSale(t, 12, 1, map[int64]int64{120: 5})
	r := p.order(t, orderBody{RequestID: "ev-1", UserID: 1, ActivityID: 12, ItemID: 120, Quantity: 1})
	no := r.Str("orderNo")
	p.waitStatus(t, no, "UNPAID")
	if c := p.cancelOrder(t, no, map[string]int64{"userId": 1}); c.Status != http.StatusOK {
		t.Fatalf("cancel: %d %v", c.Status, c.Body)
	}
	p.waitDrained(t, it)
	p.assertInvariants(t, it) // also waits until the relay has published both

	env := events.Env{Brokers: p.Cfg.Kafka.Brokers, Topic: p.Cfg.Kafka.StatusTopic, Security: p.Cfg.Kafka.Security}
	var out, errOut bytes.Buffer
	if code := events.Run(context.Background(), env, []string{"--order-no", no}, &out, &errOut); code != events.ExitOK {
		t.Fatalf("events: exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], " 1 ") || !strings.Contains(lines[1], "UNPAID") ||
		!strings.Contains(lines[len(lines)-1], " 2 ") || !strings.Contains(lines[len(lines)-1], "CLOSED    CANCELLED") {
		t.Errorf("events of %s:\n%s", no, out.String())
	}
	out.Reset()
	if code := events.Run(context.Background(), env, []string{"--request-id", "ev-1", "--json"}, &out, &errOut); code != events.ExitOK ||
		!strings.Contains(out.String(), `"version":2`) || !strings.Contains(out.String(), `"schema":"orders.status.v1"`) {
		t.Errorf("events --json: exit %d:\n%s", code, out.String())
	}
	if code := events.Run(context.Background(), env, []string{"--order-no", "12-120-none"}, &out, &errOut); code != events.ExitNone {
		t.Errorf("events of an unknown order: exit %d, want %d", code, events.ExitNone)
	}
}
