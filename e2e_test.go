package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

var both = components{"gateway", "worker"}

// testOrderBecomesUnpaid: an order is accepted, persisted and readable,
// with either of the gateway's producers (GATEWAY_PRODUCER).
func testOrderBecomesUnpaid(t *testing.T, e engine) {
	t.Parallel()
	for _, producer := range []string{"group", "writer"} {
		t.Run("GATEWAY_PRODUCER="+producer, func(t *testing.T) {
			p := mustPipeline(t, e, both, func(c *config) { c.Gateway.Producer = producer })
			it := stock.Item{ActivityID: 1, ItemID: 10086}
			p.mustSale(t, 1, 1, map[int64]int64{10086: 10})
			r := p.order(t, orderBody{RequestID: "r-1", UserID: 42, ActivityID: 1, ItemID: 10086, Quantity: 1})
			if r.Status != http.StatusAccepted || r.Str("status") != "PENDING" || r.Body["remaining"] != float64(9) {
				t.Fatalf("order: %d %v", r.Status, r.Body)
			}
			testenv.WaitFor(t, 10*time.Second, "order UNPAID", func() bool {
				g := p.do(t, "GET", "/v1/orders/"+r.Str("orderNo"), "", nil)
				return g.Str("status") == "UNPAID"
			})
			g := p.do(t, "GET", "/v1/orders/"+r.Str("orderNo"), "", nil)
			if g.Str("requestId") != "r-1" || g.Body["userId"] != float64(42) || g.Body["quantity"] != float64(1) {
				t.Errorf("order view: %v", g.Body)
			}
			p.assertSettled(t, it, 9, "one order of 10")
		})
	}
}

func testGetOrderPendingBeforePersistence(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, nil) // no worker: nothing is persisted
	p.mustSale(t, 1, 2, map[int64]int64{7: 10})
	r := p.mustAccept(t, orderBody{RequestID: "r-p", UserID: 1, ActivityID: 1, ItemID: 7, Quantity: 2})
	g := p.do(t, "GET", "/v1/orders/"+r.Str("orderNo"), "", nil)
	if g.Status != http.StatusOK || g.Str("status") != "PENDING" || g.Body["quantity"] != float64(2) || g.Str("requestId") != "r-p" {
		t.Fatalf("pending order: %d %v", g.Status, g.Body)
	}
	for _, no := range []string{"1-7-nosuchorder", "garbage", "0-0-x"} {
		if g := p.do(t, "GET", "/v1/orders/"+no, "", nil); g.Status != http.StatusNotFound || g.Code() != "ORDER_NOT_FOUND" {
			t.Errorf("GET %s: %d %v", no, g.Status, g.Body)
		}
	}
}

// state is everything a request could change: the sale's Redis keys and the
// order tables.
func (p *pipeline) state(tb testing.TB) string {
	tb.Helper()
	// The sale's keys only: background singletons (the redrive's lock and
	// fencing counter) come and go on their own.
	var b strings.Builder
	for _, line := range stocktest.Dump(tb, p.StockRedis) {
		fmt.Fprintln(&b, line)
	}
	fmt.Fprintf(&b, "%+v\n", ordertest.CountAll(tb, p.DB.Pool))
	return b.String()
}

func testOrderRejections(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, both, nil)
	it := stock.Item{ActivityID: 5, ItemID: 50}
	p.mustSale(t, 5, 2, map[int64]int64{50: 3})
	// User 1 holds a live order and requestId "taken" is used.
	if r := p.order(t, orderBody{RequestID: "taken", UserID: 1, ActivityID: 5, ItemID: 50, Quantity: 1}); r.Status != http.StatusAccepted {
		t.Fatalf("setup order: %d %v", r.Status, r.Body)
	}
	// The activity ends-in-the-past item: not on sale.
	p.waitDrained(t, it)

	valid := `{"requestId":"r-x","userId":9,"activityId":5,"itemId":50,"quantity":1}`
	cases := []struct {
		name        string
		contentType string
		body        string
		status      int
		code        string
		message     string
	}{
		{"MalformedJSON", "application/json", `{"requestId":`, 400, "INVALID_REQUEST", "malformed"},
		{"NotAnObject", "application/json", `[1,2]`, 400, "INVALID_REQUEST", ""},
		{"TrailingData", "application/json", valid + `{}`, 400, "INVALID_REQUEST", "exactly one"},
		{"UnknownField", "application/json", `{"requestId":"r-x","userId":9,"activityId":5,"itemId":50,"quantity":1,"price":1}`, 400, "INVALID_REQUEST", "price"},
		{"MissingRequestID", "application/json", `{"userId":9,"activityId":5,"itemId":50,"quantity":1}`, 400, "INVALID_REQUEST", "requestId"},
		{"LongRequestID", "application/json", `{"requestId":"` + strings.Repeat("a", 65) + `","userId":9,"activityId":5,"itemId":50,"quantity":1}`, 400, "INVALID_REQUEST", "requestId"},
		{"BadRequestIDChars", "application/json", `{"requestId":"r x/1","userId":9,"activityId":5,"itemId":50,"quantity":1}`, 400, "INVALID_REQUEST", "requestId"},
		{"ZeroUser", "application/json", `{"requestId":"r-x","userId":0,"activityId":5,"itemId":50,"quantity":1}`, 400, "INVALID_REQUEST", "userId"},
		{"NegativeActivity", "application/json", `{"requestId":"r-x","userId":9,"activityId":-5,"itemId":50,"quantity":1}`, 400, "INVALID_REQUEST", "activityId"},
		{"StringItem", "application/json", `{"requestId":"r-x","userId":9,"activityId":5,"itemId":"50","quantity":1}`, 400, "INVALID_REQUEST", "itemId"},
		{"HugeUser", "application/json", `{"requestId":"r-x","userId":9223372036854775808,"activityId":5,"itemId":50,"quantity":1}`, 400, "INVALID_REQUEST", "userId"},
		{"QuantityZero", "application/json", `{"requestId":"r-x","userId":9,"activityId":5,"itemId":50,"quantity":0}`, 400, "INVALID_REQUEST", "quantity"},
		{"QuantityOver100", "application/json", `{"requestId":"r-x","userId":9,"activityId":5,"itemId":50,"quantity":101}`, 400, "INVALID_REQUEST", "quantity"},
		{"QuantityFraction", "application/json", `{"requestId":"r-x","userId":9,"activityId":5,"itemId":50,"quantity":1.5}`, 400, "INVALID_REQUEST", "quantity"},
		{"QuantityOverActivityCap", "application/json", `{"requestId":"r-x","userId":9,"activityId":5,"itemId":50,"quantity":3}`, 400, "INVALID_REQUEST", "per-user limit of 2"},
		{"NotPreheatedItem", "application/json", `{"requestId":"r-x","userId":9,"activityId":5,"itemId":51,"quantity":1}`, 404, "NOT_ON_SALE", ""},
		{"UnknownActivity", "application/json", `{"requestId":"r-x","userId":9,"activityId":6,"itemId":50,"quantity":1}`, 404, "NOT_ON_SALE", ""},
		{"AlreadyPurchased", "application/json", `{"requestId":"r-x","userId":1,"activityId":5,"itemId":50,"quantity":1}`, 409, "ALREADY_PURCHASED", ""},
		{"SoldOut", "application/json", `{"requestId":"r-x","userId":9,"activityId":5,"itemId":50,"quantity":2}`, 400, "INVALID_REQUEST", ""}, // replaced below
		{"TooLarge", "application/json", `{"requestId":"r-x","userId":9,"activityId":5,"itemId":50,"quantity":1,"pad":"` + strings.Repeat("x", 5000) + `"}`, 413, "PAYLOAD_TOO_LARGE", ""},
		{"NotJSON", "text/plain", valid, 415, "UNSUPPORTED_MEDIA_TYPE", ""},
		{"NoContentType", "", valid, 415, "UNSUPPORTED_MEDIA_TYPE", ""},
		{"CharsetNotUTF8", "application/json; charset=latin1", valid, 415, "UNSUPPORTED_MEDIA_TYPE", "UTF-8"},
		{"NotUTF8", "application/json", `{"requestId":"r-` + "\xff" + `","userId":9,"activityId":5,"itemId":50,"quantity":1}`, 400, "INVALID_REQUEST", "UTF-8"},
		{"KeyReused", "application/json", `{"requestId":"taken","userId":1,"activityId":5,"itemId":50,"quantity":2}`, 422, "IDEMPOTENCY_KEY_REUSED", ""},
	}
	// Sold out: 2 units left; ask for 2 twice from other users so the second finds 1... simpler: drain to 1 first.
	if r := p.order(t, orderBody{RequestID: "drain", UserID: 2, ActivityID: 5, ItemID: 50, Quantity: 1}); r.Status != http.StatusAccepted {
		t.Fatalf("setup order: %d %v", r.Status, r.Body)
	}
	p.waitDrained(t, it)
	for i := range cases {
		if cases[i].name == "SoldOut" {
			cases[i].status, cases[i].code = 409, "SOLD_OUT"
		}
	}
	before := p.state(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := p.do(t, http.MethodPost, "/v1/orders", tc.contentType, tc.body)
			if r.Status != tc.status || r.Code() != tc.code {
				t.Fatalf("got %d %s (%v), want %d %s", r.Status, r.Code(), r.Body, tc.status, tc.code)
			}
			msg := r.Body["error"].(map[string]any)["message"].(string)
			if !strings.Contains(msg, tc.message) {
				t.Errorf("message %q does not mention %q", msg, tc.message)
			}
			if after := p.state(t); after != before {
				t.Errorf("rejected request changed state:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
	t.Run("SaleNotStarted", func(t *testing.T) {
		p.mustSaleWindow(t, 8, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour), map[int64]int64{1: 5})
		before := p.state(t)
		r := p.order(t, orderBody{RequestID: "early", UserID: 3, ActivityID: 8, ItemID: 1, Quantity: 1})
		if r.Status != http.StatusNotFound || r.Code() != "NOT_ON_SALE" {
			t.Fatalf("got %d %v", r.Status, r.Body)
		}
		if after := p.state(t); after != before {
			t.Errorf("rejected request changed state")
		}
	})
	p.assertInvariants(t, it)
}

func testAdminAPI(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, nil)
	body := map[string]any{"name": "x", "startsAt": time.Now().UTC(), "endsAt": time.Now().Add(time.Hour).UTC(),
		"items": []map[string]any{{"itemId": 1, "stock": 5}}}
	if r := p.do(t, "PUT", "/admin/v1/activities/3", "application/json", body); r.Status != 401 || r.Code() != "UNAUTHORIZED" {
		t.Errorf("no token: %d %v", r.Status, r.Body)
	}
	if r := p.do(t, "PUT", "/admin/v1/activities/3", "application/json", body, "Authorization", "Bearer wrong"); r.Status != 401 {
		t.Errorf("wrong token: %d %v", r.Status, r.Body)
	}
	auth := []string{"Authorization", "Bearer " + p.Admin}
	bad := map[string]any{"name": "x", "startsAt": time.Now().UTC(), "endsAt": time.Now().Add(-time.Hour).UTC(), "items": []map[string]any{{"itemId": 1, "stock": 5}}}
	if r := p.do(t, "PUT", "/admin/v1/activities/3", "application/json", bad, auth...); r.Status != 400 || r.Code() != "INVALID_REQUEST" {
		t.Errorf("bad window: %d %v", r.Status, r.Body)
	}
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
		mentions                string
		path                    string // default /admin/v1/activities/3
	}{
		{"BadDate", "application/json", `{"name":"x","startsAt":"yesterday","endsAt":"2030-01-01T00:00:00Z","items":[{"itemId":1,"stock":5}]}`, 400, "startsAt", ""},
		{"DateNotString", "application/json", `{"name":"x","startsAt":5,"endsAt":"2030-01-01T00:00:00Z","items":[{"itemId":1,"stock":5}]}`, 400, "startsAt", ""},
		{"ControlCharInName", "application/json", `{"name":"a\u0000b","startsAt":"2020-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z","items":[{"itemId":1,"stock":5}]}`, 400, "name", ""},
		{"NameNotUTF8", "application/json", "{\"name\":\"bad\xff\xfename\",\"startsAt\":\"2020-01-01T00:00:00Z\",\"endsAt\":\"2030-01-01T00:00:00Z\",\"items\":[{\"itemId\":1,\"stock\":5}]}", 400, "UTF-8", ""},
		{"LoneSurrogateInName", "application/json", `{"name":"a\ud800b","startsAt":"2020-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z","items":[{"itemId":1,"stock":5}]}`, 400, "name", ""},
		{"UnknownField", "application/json", `{"name":"x","startsAt":"2020-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z","items":[],"price":1}`, 400, "price", ""},
		{"TrailingData", "application/json", `{"name":"x","startsAt":"2020-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z","items":[{"itemId":1,"stock":5}]} junk`, 400, "one JSON object", ""},
		{"NoItems", "application/json", `{"name":"x","startsAt":"2020-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z","items":[]}`, 400, "items", ""},
		{"NotJSON", "text/plain", `{}`, 415, "Content-Type", ""},
		{"TooLarge", "application/json", `{"name":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "bytes", ""},
		{"Malformed", "application/json", `{"name":"x",`, 400, "malformed", ""},
		{"PerUserLimitTooHigh", "application/json", `{"name":"x","startsAt":"2020-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z","perUserLimit":101,"items":[{"itemId":1,"stock":5}]}`, 400, "perUserLimit", ""},
		{"NegativeStock", "application/json", `{"name":"x","startsAt":"2020-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z","items":[{"itemId":1,"stock":-1}]}`, 400, "stock", ""},
		{"DuplicateItem", "application/json", `{"name":"x","startsAt":"2020-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z","items":[{"itemId":1,"stock":5},{"itemId":1,"stock":6}]}`, 400, "twice", ""},
		{"ZeroActivityID", "application/json", `{}`, 400, "activityId", "/admin/v1/activities/0"},
		{"TextActivityID", "application/json", `{}`, 400, "activityId", "/admin/v1/activities/abc"},
		{"SignedActivityID", "application/json", `{}`, 400, "activityId", "/admin/v1/activities/+3"},
		{"LeadingZeroActivityID", "application/json", `{}`, 400, "activityId", "/admin/v1/activities/03"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := cmp.Or(tc.path, "/admin/v1/activities/3")
			r := p.do(t, "PUT", path, tc.contentType, tc.body, auth...)
			msg, _ := r.Body["error"].(map[string]any)["message"].(string)
			if r.Status != tc.status || !strings.Contains(msg, tc.mentions) {
				t.Errorf("got %d %v, want %d mentioning %q", r.Status, r.Body, tc.status, tc.mentions)
			}
		})
	}
	if r := p.do(t, "POST", "/admin/v1/activities/abc/preheat", "", nil, auth...); r.Status != 400 || r.Code() != "INVALID_REQUEST" {
		t.Errorf("preheat of a bad id: %d %v", r.Status, r.Body)
	}
	if r := p.do(t, "POST", "/admin/v1/activities/3/preheat", "", nil, auth...); r.Status != 404 || r.Code() != "ACTIVITY_NOT_FOUND" {
		t.Errorf("preheat unknown: %d %v", r.Status, r.Body)
	}
	if activities, items := ordertest.CountSales(t, p.DB.Pool); activities != 0 || items != 0 {
		t.Fatalf("rejected requests created %d activities and %d items", activities, items)
	}
	if keys := testenv.Keys(t, p.Redis.Client, p.Redis.Prefix); len(keys) != 0 {
		t.Fatalf("rejected requests wrote to Redis: %v", keys)
	}
	if r := p.do(t, "PUT", "/admin/v1/activities/3", "application/json", body, auth...); r.Status != 200 {
		t.Fatalf("upsert: %d %v", r.Status, r.Body)
	}
	r := p.do(t, "POST", "/admin/v1/activities/3/preheat", "", nil, auth...)
	if items := r.Body["items"].([]any); r.Status != 200 || items[0].(map[string]any)["loaded"] != true {
		t.Fatalf("preheat: %d %v", r.Status, r.Body)
	}
	// Preheat is idempotent: a second call does not overwrite the running stock.
	p.order(t, orderBody{RequestID: "a", UserID: 1, ActivityID: 3, ItemID: 1, Quantity: 1})
	r = p.do(t, "POST", "/admin/v1/activities/3/preheat", "", nil, auth...)
	if items := r.Body["items"].([]any); r.Status != 200 || items[0].(map[string]any)["loaded"] != false {
		t.Fatalf("second preheat: %d %v", r.Status, r.Body)
	}
	if got := p.redisStock(t, stock.Item{ActivityID: 3, ItemID: 1}); got != 4 {
		t.Errorf("redis stock after second preheat = %d, want 4", got)
	}
	// A sale that ended more than an hour ago is not loaded.
	ended := map[string]any{"name": "old", "startsAt": time.Now().Add(-5 * time.Hour).UTC(), "endsAt": time.Now().Add(-2 * time.Hour).UTC(),
		"items": []map[string]any{{"itemId": 1, "stock": 5}}}
	if r := p.do(t, "PUT", "/admin/v1/activities/4", "application/json", ended, auth...); r.Status != 200 {
		t.Fatalf("upsert of an ended sale: %d %v", r.Status, r.Body)
	}
	if r := p.do(t, "POST", "/admin/v1/activities/4/preheat", "", nil, auth...); r.Status != 409 || r.Code() != "SALE_ENDED" {
		t.Errorf("preheat of an ended sale: %d %v", r.Status, r.Body)
	}
	if n, ok := stocktest.Stock(t, p.StockRedis, stock.Item{ActivityID: 4, ItemID: 1}); ok {
		t.Errorf("an ended sale was loaded: stock %d", n)
	}
	// PUT replaces the items: one left out goes while no preheat of it began,
	// and once one did the PUT is refused and changes nothing.
	twoItems := map[string]any{"name": "two", "startsAt": time.Now().UTC(), "endsAt": time.Now().Add(time.Hour).UTC(),
		"items": []map[string]any{{"itemId": 1, "stock": 5}, {"itemId": 2, "stock": 6}}}
	if r := p.do(t, "PUT", "/admin/v1/activities/5", "application/json", twoItems, auth...); r.Status != 200 {
		t.Fatalf("upsert of two items: %d %v", r.Status, r.Body)
	}
	twoItems["items"] = []map[string]any{{"itemId": 2, "stock": 6}}
	if r := p.do(t, "PUT", "/admin/v1/activities/5", "application/json", twoItems, auth...); r.Status != 200 || len(r.Body["items"].([]any)) != 1 {
		t.Fatalf("upsert leaving item 1 out before a preheat: %d %v, want 200 with item 2 alone", r.Status, r.Body)
	}
	if r := p.do(t, "POST", "/admin/v1/activities/5/preheat", "", nil, auth...); r.Status != 200 {
		t.Fatalf("preheat: %d %v", r.Status, r.Body)
	}
	twoItems["items"] = []map[string]any{{"itemId": 3, "stock": 7}}
	if r := p.do(t, "PUT", "/admin/v1/activities/5", "application/json", twoItems, auth...); r.Status != 409 || r.Code() != "ITEM_PREHEATED" {
		t.Errorf("upsert leaving the preheated item 2 out: %d %v, want 409 ITEM_PREHEATED", r.Status, r.Body)
	}
	if r := p.do(t, "GET", "/admin/v1/activities/5", "", nil, auth...); len(r.Body["items"].([]any)) != 1 ||
		r.Body["items"].([]any)[0].(map[string]any)["itemId"] != float64(2) {
		t.Errorf("a refused upsert changed the items: %v", r.Body)
	}
	off := mustPipeline(t, e, components{"gateway"}, func(c *config) { c.Gateway.AdminToken = "" })
	if r := off.do(t, "PUT", "/admin/v1/activities/3", "application/json", body, "Authorization", "Bearer "); r.Status != 404 {
		t.Errorf("admin API without ADMIN_TOKEN: %d %v", r.Status, r.Body)
	}
	if r := off.do(t, "GET", "/admin/v1/activities/3", "", nil, "Authorization", "Bearer "); r.Status != 404 || r.Code() != "NOT_FOUND" {
		t.Errorf("admin read without ADMIN_TOKEN: %d %v", r.Status, r.Body)
	}
}

// testHotItemRace is I1 and I2 under contention: 2,000 distinct buyers for
// 100 units of one item.
func testHotItemRace(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, both, nil)
	it := stock.Item{ActivityID: 2, ItemID: 1}
	p.mustSale(t, 2, 1, map[int64]int64{1: 100})
	const buyers = 2000
	codes := make([]string, buyers)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200)
	for i := 0; i < buyers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r := p.order(t, orderBody{RequestID: fmt.Sprintf("race-%d", i), UserID: int64(1000 + i), ActivityID: 2, ItemID: 1, Quantity: 1})
			codes[i] = fmt.Sprint(r.Status, r.Code())
		}(i)
	}
	wg.Wait()
	count := map[string]int{}
	for _, c := range codes {
		count[c]++
	}
	if count["202"] != 100 || count["409SOLD_OUT"] != buyers-100 {
		t.Fatalf("answers: %v", count)
	}
	p.waitDrained(t, it)
	orders, users := 0, map[int64]bool{}
	for _, o := range p.snapshot(t, it.ActivityID).Orders {
		if o.ItemID == it.ItemID {
			orders++
			users[o.UserID] = true
		}
	}
	if orders != 100 || len(users) != 100 {
		t.Errorf("%d orders for %d users, want 100 for 100", orders, len(users))
	}
	if rs, ds := p.redisStock(t, it), p.dbStock(t, it).Stock; rs != 0 || ds != 0 {
		t.Errorf("redis stock %d, db stock %d, want 0 and 0", rs, ds)
	}
	p.assertInvariants(t, it)
}

// testIdempotency is I3: replays answer the first answer; a reused key with
// another payload is refused; concurrent copies reserve once.
func testIdempotency(t *testing.T, e engine) {
	t.Parallel()
	// Rate limits off: the 50 copies come from one user on purpose.
	p := mustPipeline(t, e, both, func(c *config) { c.Gateway.UserRPS = 0 })
	it := stock.Item{ActivityID: 4, ItemID: 9}
	p.mustSale(t, 4, 3, map[int64]int64{9: 50})
	req := orderBody{RequestID: "same", UserID: 7, ActivityID: 4, ItemID: 9, Quantity: 2}
	first := p.mustAccept(t, req)
	again := p.order(t, req)
	if again.Status != http.StatusOK || again.Body["replayed"] != true || again.Str("orderNo") != first.Str("orderNo") ||
		again.Body["remaining"] != first.Body["remaining"] {
		t.Fatalf("replay: %d %v, first %v", again.Status, again.Body, first.Body)
	}
	other := req
	other.Quantity = 1
	if r := p.order(t, other); r.Status != http.StatusUnprocessableEntity || r.Code() != "IDEMPOTENCY_KEY_REUSED" {
		t.Fatalf("reused key: %d %v", r.Status, r.Body)
	}

	copies := orderBody{RequestID: "copies", UserID: 8, ActivityID: 4, ItemID: 9, Quantity: 1}
	answers := make([]apiResponse, 50)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func(i int) { defer wg.Done(); answers[i] = p.order(t, copies) }(i)
	}
	wg.Wait()
	accepted, replayed := 0, 0
	for _, a := range answers {
		switch {
		case a.Status == http.StatusAccepted:
			accepted++
		case a.Status == http.StatusOK && a.Body["replayed"] == true:
			replayed++
		default:
			t.Errorf("copy answered %d %v", a.Status, a.Body)
		}
		if a.Str("orderNo") != answers[0].Str("orderNo") {
			t.Errorf("copies got different order numbers: %s vs %s", a.Str("orderNo"), answers[0].Str("orderNo"))
		}
	}
	if accepted != 1 || replayed != 49 {
		t.Errorf("accepted %d, replayed %d; want 1 and 49", accepted, replayed)
	}
	p.waitDrained(t, it)
	n := 0
	for _, o := range p.snapshot(t, it.ActivityID).Orders {
		if o.RequestID == "same" || o.RequestID == "copies" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d orders for two requestIds", n)
	}
	if got := p.dbStock(t, it).Stock; got != 47 {
		t.Errorf("db stock %d, want 47", got)
	}
	p.assertInvariants(t, it)
}

// testKafkaUnreachable: a failed produce releases the reservation and
// answers 503; Redis is as before and a retry later succeeds.
func testKafkaUnreachable(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, func(c *config) { c.Gateway.ProduceTimeout = 2 * time.Second })
	it := stock.Item{ActivityID: 6, ItemID: 1}
	p.mustSale(t, 6, 1, map[int64]int64{1: 10})
	snapshot := func() string {
		tr, err := p.Stock.Traces(context.Background(), []stock.Item{it}, "down")
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("stock=%d journal=%v marker=%q dedup=%+v", p.redisStock(t, it), stocktest.Journal(t, p.StockRedis, it),
			stocktest.MarkerOwner(t, p.StockRedis, it, 5), tr[0].Dedup)
	}
	before := snapshot()
	if p.Kafka.Cluster == nil {
		t.Skip("needs the in-process broker to stop it")
	}
	p.Kafka.Cluster.Close()
	r := p.order(t, orderBody{RequestID: "down", UserID: 5, ActivityID: 6, ItemID: 1, Quantity: 1})
	if r.Status != http.StatusServiceUnavailable || r.Code() != "UNAVAILABLE" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("got %d %v", r.Status, r.Body)
	}
	if after := snapshot(); after != before {
		t.Errorf("redis changed:\nbefore %s\nafter  %s", before, after)
	}
	if rz := p.do(t, "GET", "/readyz", "", nil); rz.Status != http.StatusServiceUnavailable {
		t.Errorf("readyz with kafka down: %d %v", rz.Status, rz.Body)
	}
}

// testProducedEventMatchesSchema reads what the gateway produced.
func testProducedEventMatchesSchema(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, nil)
	p.mustSale(t, 7, 1, map[int64]int64{3: 10})
	r := p.mustAccept(t, orderBody{RequestID: "schema-1", UserID: 11, ActivityID: 7, ItemID: 3, Quantity: 1})
	msg := mustReadEvent(t, p)
	if err := event.Validate(msg.Value); err != nil {
		t.Fatalf("produced event %s: %v", msg.Value, err)
	}
	ev, err := event.Decode(msg.Value)
	if err != nil {
		t.Fatal(err)
	}
	if ev.RequestID != "schema-1" || ev.OrderNo != r.Str("orderNo") || string(msg.Key) != "7:3" {
		t.Errorf("event %+v key %s", ev, msg.Key)
	}
	if event.Header(msg, "schema") != event.SchemaV1 || event.Header(msg, "request-id") != "schema-1" {
		t.Errorf("headers %v", msg.Headers)
	}
	// The schema is a real gate: a wrong event fails it.
	for _, bad := range []string{`{}`, `{"requestId":"a","orderNo":"b","userId":0,"activityId":1,"itemId":1,"quantity":1,"reservedAt":"2026-01-01T00:00:00Z"}`,
		`{"requestId":"a","orderNo":"b","userId":1,"activityId":1,"itemId":1,"quantity":1,"reservedAt":"yesterday"}`} {
		if event.Validate([]byte(bad)) == nil {
			t.Errorf("schema accepted %s", bad)
		}
	}
}
