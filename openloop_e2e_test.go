package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"orderpipe/bench"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// TestBenchOpenLoop runs the load tool's open loop against the real
// pipeline with the trivial handler as the floor: every request is sent and
// answered on both, the gateway's 202s are audited like a closed-loop run's,
// and the report carries both sides.
func TestBenchOpenLoop(t *testing.T) {
	t.Parallel()
	p := mustPipeline(t, components{"gateway", "worker"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	floorDone := make(chan error, 1)
	go func() { floorDone <- bench.ServeFloor(ctx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	var floorURL string
	select {
	case a := <-addrc:
		floorURL = "http://" + a.String()
	case err := <-floorDone:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-floorDone; err != nil {
			t.Errorf("floor server: %v", err)
		}
	})
	const requests = 300
	rep, err := bench.Run(context.Background(), bench.Config{URL: p.URL, AdminToken: p.Admin, DatabaseURL: p.DB.URL,
		Redis: redisconn.Config{Addr: testenv.RedisAddr()}, RedisPrefix: p.Redis.Prefix, Concurrency: 20, Requests: requests, Items: 1,
		Stock: requests, Seed: 7, Rate: 400, FloorURL: floorURL})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rep.WriteText(&out)
	t.Log(out.String())
	if !rep.OK {
		t.Fatalf("audit failed:\n%s", out.String())
	}
	o := rep.OpenLoop
	if o == nil || o.Floor == nil {
		t.Fatalf("no open-loop figures in the report: %+v", o)
	}
	if rep.Accepted != requests || o.Gateway.Status["202"] != requests || o.Gateway.Answered != requests {
		t.Errorf("gateway: %d accepted, statuses %v, want all %d 202", rep.Accepted, o.Gateway.Status, requests)
	}
	if o.Floor.Status["202"] != requests || o.Floor.URL != floorURL {
		t.Errorf("floor at %s: statuses %v, want all %d 202", o.Floor.URL, o.Floor.Status, requests)
	}
	if o.Rate != 400 || o.Connections != 20 || o.P99Ratio <= 0 {
		t.Errorf("rate %v, connections %d, P99 ratio %v", o.Rate, o.Connections, o.P99Ratio)
	}
	for name, l := range map[string]bench.Latency{"gateway": o.Gateway.Latency, "floor": o.Floor.Latency} {
		if l.P50 <= 0 || l.P99 < l.P50 || l.P999 < l.P99 || l.Max < l.P999 {
			t.Errorf("%s latency %+v is not ordered", name, l)
		}
	}
	if !strings.Contains(out.String(), "gateway / trivial handler: P50") {
		t.Errorf("the report has no side-by-side ratio line:\n%s", out.String())
	}
	p.assertInvariants(t, stock.Item{ActivityID: rep.Scenario.ActivityID, ItemID: 1})
}
