package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// lagSeries is the worker's consumer-lag gauge.
const lagSeries = "orderpipe_worker_consumer_lag_messages"

// testPostgresOutageKeepsTakingOrders: taking an order never touches
// Postgres, so while it is cut the gateway stays ready (/readyz checks Redis
// and Kafka only) and answers POST /v1/orders 202 — as does a gateway
// started during the outage. Order lookups and pay answer 503 UNAVAILABLE
// meanwhile (GET reads Postgres first; a 200 PENDING from the journal would
// be as good). Kafka holds the events, the lag gauge counts them all, and
// once Postgres returns the worker catches up: every accepted orderNo is an
// UNPAID order, the lag is 0 and the invariants hold.
func testPostgresOutageKeepsTakingOrders(t *testing.T, e engine) {
	t.Parallel()
	proxy := mustPostgresProxy(t)
	p := mustPipeline(t, e, both, func(c *config) {
		viaPostgresProxy(c, proxy)
		c.Worker.LagInterval = 100 * time.Millisecond
		c.Worker.RedriveAfter = time.Hour // the lag counts the gateway's events only
	})
	const items = 4 // keys on several partitions: the lag is summed over all
	sale := map[int64]int64{}
	for i := int64(1); i <= items; i++ {
		sale[i] = 50
	}
	p.mustSale(t, 8, 1, sale)
	assertReady(t, p)

	proxy.Down()
	var accepted []string
	for i := range 24 {
		r := p.order(t, orderBody{RequestID: fmt.Sprintf("pg-out-%d", i), UserID: int64(i + 1), ActivityID: 8, ItemID: int64(i%items + 1), Quantity: 1})
		if r.Status != http.StatusAccepted {
			t.Fatalf("order %d with Postgres down: %d %v, want 202 (taking an order does not need Postgres)", i, r.Status, r.Body)
		}
		accepted = append(accepted, r.Str("orderNo"))
	}
	assertReady(t, p)
	testenv.WaitFor(t, 20*time.Second, "the worker's Postgres breaker to open", func() bool {
		return p.metric(t, `orderpipe_breaker_state{name="worker-postgres"}`) == "2"
	})
	testenv.WaitFor(t, 20*time.Second, "the lag gauge to count every accepted order", func() bool {
		return p.metric(t, lagSeries) == strconv.Itoa(len(accepted))
	})
	assertReady(t, p)

	for _, no := range accepted[:3] {
		g := p.do(t, http.MethodGet, "/v1/orders/"+no, "", nil)
		switch {
		case g.Status == http.StatusServiceUnavailable && g.Code() == "UNAVAILABLE" && g.Header.Get("Retry-After") != "":
		case g.Status == http.StatusOK && g.Str("status") == "PENDING":
		default:
			t.Errorf("GET %s with Postgres down: %d %v, want 503 UNAVAILABLE with Retry-After (or 200 PENDING)", no, g.Status, g.Body)
		}
		pay := p.do(t, http.MethodPost, "/v1/orders/"+no+"/pay", "", nil)
		if pay.Status != http.StatusServiceUnavailable || pay.Code() != "UNAVAILABLE" || pay.Header.Get("Retry-After") == "" {
			t.Errorf("pay %s with Postgres down: %d %v, want 503 UNAVAILABLE with Retry-After", no, pay.Status, pay.Body)
		}
	}

	// A gateway started (restarted, scaled out) during the outage takes
	// orders too.
	late := startGateway(t, p.Cfg)
	assertReady(t, late)
	r := late.mustAccept(t, orderBody{RequestID: "pg-out-late", UserID: 1000, ActivityID: 8, ItemID: 1, Quantity: 1})
	accepted = append(accepted, r.Str("orderNo"))
	p.mu.Lock()
	p.accepted[r.Str("orderNo")] = "pg-out-late"
	p.mu.Unlock()
	testenv.WaitFor(t, 20*time.Second, "the lag gauge to count the late gateway's order", func() bool {
		return p.metric(t, lagSeries) == strconv.Itoa(len(accepted))
	})

	proxy.Up(t)
	testenv.WaitFor(t, 60*time.Second, "every accepted orderNo to be an UNPAID order", func() bool {
		for _, no := range accepted {
			if o, err := p.orderOf(t, no); err != nil || o.Status != client.StatusUnpaid {
				return false
			}
		}
		return true
	})
	testenv.WaitFor(t, 20*time.Second, "the lag gauge to fall to 0", func() bool { return p.metric(t, lagSeries) == "0" })
	for i := int64(1); i <= items; i++ {
		it := stock.Item{ActivityID: 8, ItemID: i}
		p.waitDrained(t, it)
		p.assertInvariants(t, it)
	}
}

// assertReady checks the gateway's /readyz answers 200 and asks exactly
// what taking an order needs: Redis and Kafka, not Postgres.
func assertReady(tb testing.TB, p *pipeline) {
	tb.Helper()
	rz := p.do(tb, http.MethodGet, "/readyz", "", nil)
	checks, _ := rz.Body["checks"].(map[string]any)
	if rz.Status != http.StatusOK || len(checks) != 2 || checks["redis"] != "ok" || checks["kafka"] != "ok" {
		tb.Errorf("readyz %d %v, want 200 with checks redis and kafka ok (and no postgres)", rz.Status, rz.Body)
	}
}

// startGateway runs another gateway process on cfg, stopped at cleanup.
func startGateway(tb testing.TB, cfg config) *pipeline {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := &pipeline{URL: "http://" + ln.Addr().String()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runComponents(ctx, testLog(), cfg, components{"gateway"}, ln) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("gateway: %v", err)
		}
	})
	testenv.WaitFor(tb, 20*time.Second, "the new gateway's /healthz", func() bool {
		select {
		case err := <-done:
			done <- err
			tb.Fatalf("gateway stopped before serving: %v", err)
		default:
		}
		res, _, err := get(tb, g.URL+"/healthz")
		return err == nil && res.StatusCode == http.StatusOK
	})
	return g
}
