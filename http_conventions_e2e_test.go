package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"orderpipe/pkg/stock"
)

// testIntegersByValue: on a running pipeline, an integer field spelled 24.0
// or 2.4e1 has the same effect as 24 (the reservation, the order, a replay
// of the same payload), and 24.5, null and 1e400 are refused 400
// INVALID_REQUEST naming the field with nothing changed; so are null where
// the activity upsert has no null, and a fraction in it.
func testIntegersByValue(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	it := stock.Item{ActivityID: 41, ItemID: 410}
	p.mustSale(t, 41, 50, map[int64]int64{410: 1000})
	auth := []string{"Authorization", "Bearer " + p.Admin}
	order := func(rid string, user, quantity string) apiResponse {
		t.Helper()
		body := fmt.Sprintf(`{"requestId":%q,"userId":%s,"activityId":41,"itemId":410,"quantity":%s}`, rid, user, quantity)
		r := p.do(t, http.MethodPost, "/v1/orders", "application/json", body)
		if (r.Status == http.StatusAccepted || r.Status == http.StatusOK) && r.Str("orderNo") != "" {
			p.mu.Lock()
			if p.accepted == nil {
				p.accepted = map[string]string{}
			}
			p.accepted[r.Str("orderNo")] = rid
			p.mu.Unlock()
		}
		return r
	}

	remaining := int64(1000)
	for i, q := range []string{"24", "24.0", "2.4e1", "240e-1"} {
		rid := fmt.Sprintf("r-int-%d", i)
		user := fmt.Sprintf("%d.0", 100+i)
		r := order(rid, user, q)
		remaining -= 24
		if r.Status != http.StatusAccepted || r.Body["remaining"] != float64(remaining) {
			t.Fatalf("quantity %s: %d %v, want 202 with remaining %d", q, r.Status, r.Body, remaining)
		}
		// The same payload by value is a replay, whatever its spelling.
		if again := order(rid, fmt.Sprintf("%de0", 100+i), "24"); again.Status != http.StatusOK || again.Str("orderNo") != r.Str("orderNo") {
			t.Fatalf("replay of %s as 24: %d %v, want 200 with %s", q, again.Status, again.Body, r.Str("orderNo"))
		}
		got := p.do(t, http.MethodGet, "/v1/orders/"+r.Str("orderNo"), "", nil)
		if got.Status != http.StatusOK || got.Body["quantity"] != float64(24) || got.Body["userId"] != float64(100+i) {
			t.Fatalf("GET the order of quantity %s: %d %v, want quantity 24, userId %d", q, got.Status, got.Body, 100+i)
		}
	}
	p.waitDrained(t, it)
	before, beforeDB := p.redisStock(t, it), p.dbStock(t, it).Stock
	for _, tc := range []struct{ user, quantity, message string }{
		{"7", "24.5", "quantity must be an integer"},
		{"7", "null", "quantity must be an integer, not null"},
		{"7", "1e400", "quantity is out of range"},
		{"null", "1", "userId must be an integer, not null"},
		{"7.5", "1", "userId must be an integer"},
		{"1e19", "1", "userId is out of range"},
	} {
		r := order("r-refused", tc.user, tc.quantity)
		msg, _ := r.Body["error"].(map[string]any)["message"].(string)
		if r.Status != http.StatusBadRequest || r.Code() != "INVALID_REQUEST" || !strings.HasPrefix(msg, tc.message) {
			t.Errorf("userId %s quantity %s: %d %v, want 400 INVALID_REQUEST %q", tc.user, tc.quantity, r.Status, r.Body, tc.message)
		}
	}
	if after, afterDB, n := p.redisStock(t, it), p.dbStock(t, it).Stock, p.journalLen(t, it); after != before || afterDB != beforeDB || n != 0 {
		t.Errorf("refused requests changed the stock: Redis %d → %d, Postgres %d → %d, %d in flight", before, after, beforeDB, afterDB, n)
	}
	// r-refused was never taken: it is free for a real order.
	if r := order("r-refused", "7", "1"); r.Status != http.StatusAccepted {
		t.Errorf("the refused requestId, then a good order: %d %v, want 202", r.Status, r.Body)
	}

	// The activity upsert reads its integers by value, and refuses null.
	put := func(body string) apiResponse {
		t.Helper()
		return p.do(t, http.MethodPut, "/admin/v1/activities/42", "application/json", body, auth...)
	}
	activity := func(limit, items string) string {
		return `{"name":"ints","startsAt":"2030-01-01T10:00:00Z","endsAt":"2030-01-01T11:00:00Z"` + limit + `,"items":[` + items + `]}`
	}
	if r := put(activity(`,"perUserLimit":3.0`, `{"itemId":4.2e2,"stock":2.4e1,"buckets":2.0}`)); r.Status != http.StatusOK ||
		r.Body["perUserLimit"] != float64(3) || !strings.Contains(fmt.Sprint(r.Body["items"]), "initialStock:24 itemId:420") {
		t.Fatalf("PUT with 3.0, 4.2e2, 2.4e1, 2.0: %d %v, want perUserLimit 3, item 420 of stock 24", r.Status, r.Body)
	}
	stored := p.do(t, http.MethodGet, "/admin/v1/activities/42", "", nil, auth...)
	for _, tc := range []struct{ limit, items, message string }{
		{"", `{"itemId":420,"stock":30,"buckets":null}`, "items[].buckets must be an integer, not null"},
		{"", `{"itemId":420,"stock":null}`, "items[].stock must be an integer, not null"},
		{"", `{"itemId":420}`, "items[].stock is required"},
		{`,"perUserLimit":null`, `{"itemId":420,"stock":30}`, "perUserLimit must be an integer, not null"},
		{"", `{"itemId":420,"stock":24.5}`, "items[].stock must be an integer"},
		{"", `{"itemId":420,"stock":1e400}`, "items[].stock is out of range"},
	} {
		r := put(activity(tc.limit, tc.items))
		msg, _ := r.Body["error"].(map[string]any)["message"].(string)
		if r.Status != http.StatusBadRequest || r.Code() != "INVALID_REQUEST" || !strings.HasPrefix(msg, tc.message) {
			t.Errorf("PUT %s%s: %d %v, want 400 INVALID_REQUEST %q", tc.limit, tc.items, r.Status, r.Body, tc.message)
		}
	}
	if now := p.do(t, http.MethodGet, "/admin/v1/activities/42", "", nil, auth...); fmt.Sprint(now.Body) != fmt.Sprint(stored.Body) {
		t.Errorf("refused upserts changed the activity: %v, was %v", now.Body, stored.Body)
	}
	p.waitDrained(t, it)
	p.assertInvariants(t, it)
}

// testMethodNotAllowedEndToEnd: on a running pipeline with the admin API on,
// each path answers a method it does not serve 405 with Allow (checked
// against openapi.json by the harness's contract), and HEAD like GET.
func testMethodNotAllowedEndToEnd(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, nil)
	p.mustSale(t, 43, 1, map[int64]int64{430: 5})
	auth := []string{"Authorization", "Bearer " + p.Admin}
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/v1/orders", "POST"},
		{"PUT", "/v1/orders/1-10086-mx1ir84j7901087d0b53", "GET, HEAD"},
		{"GET", "/v1/orders/1-10086-mx1ir84j7901087d0b53/pay", "POST"},
		{"POST", "/admin/v1/activities", "GET, HEAD"},
		{"DELETE", "/admin/v1/activities/43", "GET, HEAD, PUT"},
		{"GET", "/admin/v1/activities/43/preheat", "POST"},
		{"PATCH", "/admin/v1/activities/43/end", "POST"},
		{"POST", "/healthz", "GET, HEAD"},
		{"DELETE", "/metrics", "GET, HEAD"},
	} {
		r := p.do(t, tc.method, tc.path, "", nil, auth...)
		if r.Status != http.StatusMethodNotAllowed || r.Code() != "METHOD_NOT_ALLOWED" || r.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d Allow %q %v, want 405 METHOD_NOT_ALLOWED Allow %q", tc.method, tc.path, r.Status, r.Header.Get("Allow"), r.Body, tc.allow)
		}
	}
	for _, path := range []string{"/admin/v1/activities/43", "/admin/v1/activities", "/healthz"} {
		get := p.do(t, "GET", path, "", nil, auth...)
		head := p.do(t, "HEAD", path, "", nil, auth...)
		if head.Status != get.Status || get.Status != http.StatusOK || head.Body != nil {
			t.Errorf("HEAD %s: %d %v; GET %d", path, head.Status, head.Body, get.Status)
		}
	}
}
