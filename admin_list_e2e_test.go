package main

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"orderpipe/pkg/stock"
)

// testListActivitiesPagesNewestFirst: GET /admin/v1/activities pages through
// every activity once, the latest start first (ties by the higher id), each
// with its items' numbers as GET of one activity gives them; bad paging
// input is a 400 that says why.
func testListActivitiesPagesNewestFirst(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	auth := []string{"Authorization", "Bearer " + p.Admin}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	// Activities 1..5 start an hour apart in the order 3, 1, 4, 5 (5 and 4 tie).
	starts := map[int64]time.Duration{3: 0, 1: time.Hour, 4: 2 * time.Hour, 5: 2 * time.Hour, 2: 3 * time.Hour}
	for id, d := range starts {
		p.mustSaleWindow(t, id, base.Add(d), base.Add(d+24*time.Hour), map[int64]int64{10 * id: 10 * id})
	}
	// Activity 3 is on sale now: an order shows in its numbers.
	if r := p.order(t, orderBody{RequestID: "list-1", UserID: 1, ActivityID: 3, ItemID: 30, Quantity: 1}); r.Status != http.StatusAccepted {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	p.waitDrained(t, stock.Item{ActivityID: 3, ItemID: 30})

	want := []int64{2, 5, 4, 1, 3}
	var got []int64
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatalf("more pages than activities: %v", got)
		}
		q := url.Values{"limit": {"2"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := p.do(t, http.MethodGet, "/admin/v1/activities?"+q.Encode(), "", nil, auth...)
		if r.Status != http.StatusOK {
			t.Fatalf("list: %d %v", r.Status, r.Body)
		}
		acts, _ := r.Body["activities"].([]any)
		for _, a := range acts {
			a := a.(map[string]any)
			id := int64(a["activityId"].(float64))
			got = append(got, id)
			if id == 3 {
				it := a["items"].([]any)[0].(map[string]any)
				if it["sold"] != float64(1) || it["stock"] != float64(29) || it["redisStock"] != float64(29) || it["inFlight"] != float64(0) {
					t.Errorf("activity 3's item in the list: %v, want sold 1, stock 29, redisStock 29, inFlight 0", it)
				}
			}
		}
		cursor = r.Str("nextCursor")
		if cursor == "" {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("listed %v, want %v (newest start first, ties by the higher id, each once)", got, want)
	}
	if r := p.do(t, http.MethodGet, "/admin/v1/activities", "", nil, auth...); r.Status != http.StatusOK || len(r.Body["activities"].([]any)) != 5 || r.Str("nextCursor") != "" {
		t.Errorf("the default page: %d %v, want all 5 and no nextCursor", r.Status, r.Body)
	}
	for _, bad := range []string{"limit=0", "limit=101", "limit=x", "limit=%2B5", "limit=05", "limit=1&limit=2", "cursor=nope", "cursor=", "page=2"} {
		if r := p.do(t, http.MethodGet, "/admin/v1/activities?"+bad, "", nil, auth...); r.Status != http.StatusBadRequest || r.Code() != "INVALID_REQUEST" {
			t.Errorf("list with %s: %d %v, want 400 INVALID_REQUEST", bad, r.Status, r.Body)
		}
	}
	if r := p.do(t, http.MethodGet, "/admin/v1/activities", "", nil); r.Status != http.StatusUnauthorized {
		t.Errorf("list without the token: %d, want 401", r.Status)
	}
}
