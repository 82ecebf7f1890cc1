package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"orderpipe/bench"
	"orderpipe/pkg/stock"
)

// testBenchOpenLoop runs the load tool's open loop against the real
// pipeline with the trivial handler as the floor: every request is sent and
// answered on both, the gateway's 202s are audited like a closed-loop run's,
// and the report carries both sides.
func testBenchOpenLoop(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	floorURL := mustFloor(t, bench.ServeFloor)
	const requests = 300
	rep, out := mustBenchRun(t, p, bench.Config{Concurrency: 20, Requests: requests, Items: 1,
		Stock: requests, Seed: 7, Rate: 400, FloorURL: floorURL})
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
	if !strings.Contains(out, "gateway / trivial handler: P50") {
		t.Errorf("the report has no side-by-side ratio line:\n%s", out)
	}
	p.assertInvariants(t, stock.Item{ActivityID: rep.Scenario.ActivityID, ItemID: 1})
}

// testBenchSoldOutFlood runs the load tool's sold-out flood in a closed loop
// against the real pipeline, the trivial handler answering SOLD_OUT as the
// floor: every answer of both halves is a refusal, nothing is sold, and
// both halves carry the CPU of the named process (this one, which serves
// both here).
func testBenchSoldOutFlood(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	floorURL := mustFloor(t, func(ctx context.Context, addr string, ready func(net.Addr)) error {
		return bench.ServeFloorStatus(ctx, addr, http.StatusConflict, ready)
	})
	const requests = 400
	rep, out := mustBenchRun(t, p, bench.Config{Concurrency: 20, Requests: requests, Items: 1,
		Seed: 11, SoldOut: true, FloorURL: floorURL, FloorName: "trivial handler", Procs: []bench.Proc{{Name: "test", PIDs: []int{os.Getpid()}}}})
	if rep.OpenLoop != nil || rep.Floor == nil || rep.Pipeline == nil {
		t.Fatalf("closed loop with a floor: open loop %v, floor %v, pipeline %v", rep.OpenLoop, rep.Floor, rep.Pipeline)
	}
	if rep.Accepted != 0 || rep.OrdersInDB != 0 || rep.RejectedByCode["SOLD_OUT"] != requests {
		t.Errorf("the flood sold something: %d accepted, %d orders, refusals %v", rep.Accepted, rep.OrdersInDB, rep.RejectedByCode)
	}
	for _, h := range []*bench.Half{rep.Floor, rep.Pipeline} {
		if h.Requests != requests || h.Refusals != requests || h.RefusalsPerSec <= 0 || h.Latency.P50 <= 0 || h.Latency.Max < h.Latency.P99 {
			t.Errorf("%s: %d requests, %d refusals at %.0f/s, latency %+v; want all %d refused", h.Name, h.Requests, h.Refusals,
				h.RefusalsPerSec, h.Latency, requests)
		}
		if len(h.Procs) != 1 || h.Procs[0].Name != "test" || h.Procs[0].CPUPerRequest < 0 || h.Procs[0].Note != "" {
			t.Errorf("%s: procs %+v, want this process's CPU per request", h.Name, h.Procs)
		}
	}
	if rep.Floor.URL != floorURL || rep.Pipeline.URL != p.URL {
		t.Errorf("halves at %s and %s, want %s and %s", rep.Floor.URL, rep.Pipeline.URL, floorURL, p.URL)
	}
	if !strings.Contains(out, "trivial handler beside the pipeline") || !strings.Contains(out, "test CPU µs/refusal") {
		t.Errorf("the report does not set the floor beside the pipeline:\n%s", out)
	}
}

// mustFloor starts a floor server (serve, on a free local port) until the
// test ends and returns its URL.
func mustFloor(t *testing.T, serve func(ctx context.Context, addr string, ready func(net.Addr)) error) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	floorDone := make(chan error, 1)
	go func() { floorDone <- serve(ctx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	var floorURL string
	select {
	case a := <-addrc:
		floorURL = "http://" + a.String()
	case err := <-floorDone:
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-floorDone; err != nil {
			t.Errorf("floor server: %v", err)
		}
	})
	return floorURL
}
