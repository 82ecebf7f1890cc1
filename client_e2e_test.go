package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// testGoClientSpeaksEveryRoute drives every route of the API through the
// Go client (gateway/client) against a running pipeline, each exchange
// checked against openapi.json: the typed answers, and the typed errors
// for the refusals a storefront meets.
func testGoClientSpeaksEveryRoute(t *testing.T, e engine) {
	p := mustPipeline(t, e, both, nil)
	ctx := contractCtx(t, "client")
	api := p.api()
	it := stock.Item{ActivityID: 1, ItemID: 5}
	p.mustSale(t, 1, 1, map[int64]int64{5: 2})
	mustFail := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}

	if err := api.Healthz(ctx); err != nil {
		t.Errorf("healthz: %v", err)
	}
	if r, err := api.Ready(ctx); err != nil || r.Status != "ok" {
		t.Errorf("readyz: %+v %v", r, err)
	}
	if m, err := api.Metrics(ctx); err != nil || !strings.Contains(string(m), "orderpipe_") {
		t.Errorf("metrics: %d bytes, %v", len(m), err)
	}
	if doc, err := api.OpenAPI(ctx); err != nil || !strings.Contains(string(doc), `"openapi"`) {
		t.Errorf("openapi.json: %d bytes, %v", len(doc), err)
	}

	first := client.OrderRequest{RequestID: "c-1", UserID: 1, ActivityID: 1, ItemID: 5, Quantity: 1}
	o1, err := api.PlaceOrder(ctx, first)
	if err != nil || o1.HTTPStatus != 202 || o1.Replayed || o1.Status != client.StatusPending || o1.Remaining != 1 {
		t.Fatalf("place: %+v %v", o1, err)
	}
	again, err := api.PlaceOrderRetrying(ctx, first, client.Retry{Budget: 10 * time.Second})
	if err != nil || again.HTTPStatus != 200 || !again.Replayed || again.OrderNo != o1.OrderNo {
		t.Errorf("replay: %+v %v, want 200 replaying %s", again, err, o1.OrderNo)
	}
	other := first
	other.UserID = 9
	_, err = api.PlaceOrder(ctx, other)
	mustFail("same requestId, another payload", err, client.ErrKeyReused)
	_, err = api.PlaceOrder(ctx, client.OrderRequest{RequestID: "c-1b", UserID: 1, ActivityID: 1, ItemID: 5, Quantity: 1})
	mustFail("second order of user 1", err, client.ErrAlreadyPurchased)
	o2, err := api.PlaceOrder(ctx, client.OrderRequest{RequestID: "c-2", UserID: 2, ActivityID: 1, ItemID: 5, Quantity: 1})
	if err != nil || o2.Remaining != 0 {
		t.Fatalf("place user 2: %+v %v", o2, err)
	}
	_, err = api.PlaceOrder(ctx, client.OrderRequest{RequestID: "c-3", UserID: 3, ActivityID: 1, ItemID: 5, Quantity: 1})
	mustFail("third unit of two", err, client.ErrSoldOut)
	_, err = api.PlaceOrder(ctx, client.OrderRequest{RequestID: "c-4", UserID: 4, ActivityID: 1, ItemID: 5, Quantity: 0})
	mustFail("quantity 0", err, client.ErrInvalidRequest)
	_, err = api.PlaceOrder(ctx, client.OrderRequest{RequestID: "c-5", UserID: 5, ActivityID: 99, ItemID: 5, Quantity: 1})
	mustFail("no such sale", err, client.ErrNotOnSale)
	p.mu.Lock()
	p.accepted = map[string]string{o1.OrderNo: "c-1", o2.OrderNo: "c-2"}
	p.mu.Unlock()

	_, err = api.GetOrder(ctx, "1-5-mx1ir84j7901087d0b53")
	mustFail("unknown orderNo", err, client.ErrOrderNotFound)
	for _, no := range []string{o1.OrderNo, o2.OrderNo} {
		testenv.WaitFor(t, 10*time.Second, "order "+no+" UNPAID", func() bool {
			o, err := api.GetOrder(ctx, no)
			return err == nil && o.Status == client.StatusUnpaid
		})
	}
	if paid, err := api.Pay(ctx, o1.OrderNo); err != nil || paid.Status != client.StatusPaid {
		t.Errorf("pay: %+v %v", paid, err)
	}
	if paid, err := api.Pay(ctx, o1.OrderNo); err != nil || paid.Status != client.StatusPaid {
		t.Errorf("pay again (idempotent): %+v %v", paid, err)
	}
	_, err = api.Cancel(ctx, o1.OrderNo, 1)
	mustFail("cancel a paid order", err, client.ErrOrderPaid)
	_, err = api.Cancel(ctx, o2.OrderNo, 1)
	mustFail("cancel another user's order", err, client.ErrOrderNotFound)
	if c, err := api.Cancel(ctx, o2.OrderNo, 2); err != nil || c.Status != client.StatusClosed || c.Reason != "CANCELLED" {
		t.Errorf("cancel: %+v %v", c, err)
	}
	_, err = api.Pay(ctx, o2.OrderNo)
	mustFail("pay a cancelled order", err, client.ErrOrderClosed)
	if o, err := api.GetOrder(ctx, o2.OrderNo); err != nil || o.Status != client.StatusClosed || o.Reason != "CANCELLED" || o.ClosedAt == nil {
		t.Errorf("cancelled order: %+v %v", o, err)
	}

	a, err := api.GetActivity(ctx, 1)
	if err != nil || len(a.Items) != 1 || a.Items[0].Sold != 1 || a.Items[0].Closed != 1 || a.Redis != "ok" {
		t.Errorf("activity: %+v %v", a, err)
	}
	page, err := api.ListActivities(ctx, 10, "")
	if err != nil || len(page.Activities) != 1 || page.Activities[0].ActivityID != 1 || page.NextCursor != "" {
		t.Errorf("activities: %+v %v", page, err)
	}
	_, err = api.PutActivity(ctx, 1, client.ActivityUpsert{Name: "sale 1", StartsAt: a.StartsAt, EndsAt: a.EndsAt,
		Items: []client.ItemUpsert{{ItemID: 5, Stock: 0}}})
	mustFail("stock below what is sold", err, client.ErrStockBelowSold)
	anonymous := p.api()
	anonymous.AdminToken = ""
	_, err = anonymous.GetActivity(ctx, 1)
	mustFail("admin without the token", err, client.ErrUnauthorized)
	if ended, err := api.EndActivity(ctx, 1); err != nil || ended.EndsAt.After(time.Now().Add(time.Second)) {
		t.Errorf("end: %+v %v", ended, err)
	}
	_, err = api.PlaceOrder(ctx, client.OrderRequest{RequestID: "c-6", UserID: 6, ActivityID: 1, ItemID: 5, Quantity: 1})
	mustFail("order after the end", err, client.ErrNotOnSale)

	p.waitDrained(t, it)
	p.assertInvariants(t, it)
}
