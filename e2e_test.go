package main

import (
	"testing"

	"orderpipe/pkg/stock"
)

func TestSmokeOrderBecomesUnpaid(t *testing.T) {
	p := mustPipeline(t, components{gateway: true, worker: true}, nil)
	it := stock.Item{ActivityID: 1, ItemID: 10086}
	p.mustSale(t, 1, 1, map[int64]int64{10086: 10})
	r := p.order(t, orderBody{RequestID: "r-1", UserID: 42, ActivityID: 1, ItemID: 10086, Quantity: 1})
	if r.Status != 202 || r.Str("status") != "PENDING" {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	waitFor(t, 10e9, "order UNPAID", func() bool {
		g := p.do(t, "GET", "/v1/orders/"+r.Str("orderNo"), "", nil)
		return g.Str("status") == "UNPAID"
	})
	p.waitDrained(t, it)
	p.assertInvariants(t, it)
}
