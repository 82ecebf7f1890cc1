package main

import (
	"fmt"
	"net/http"
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
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	// Activities 1..5 start an hour apart in the order 3, 1, 4, 5 (5 and 4 tie).
	starts := map[int64]time.Duration{3: 0, 1: time.Hour, 4: 2 * time.Hour, 5: 2 * time.Hour, 2: 3 * time.Hour}
	for id, d := range starts {
		p.mustSaleWindow(t, id, base.Add(d), base.Add(d+24*time.Hour), map[int64]int64{10 * id: 10 * id})
	}
	// Activity 3 is on sale now: an order shows in its numbers.
	if placed, err := p.place(t, orderBody{RequestID: "list-1", UserID: 1, ActivityID: 3, ItemID: 30, Quantity: 1}); err != nil || placed.HTTPStatus != http.StatusAccepted {
		t.Fatalf("order: %d %v", placed.HTTPStatus, err)
	}
	p.waitDrained(t, stock.Item{ActivityID: 3, ItemID: 30})

	want := []int64{2, 5, 4, 1, 3}
	var got []int64
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatalf("more pages than activities: %v", got)
		}
		page, err := p.api().ListActivities(contractCtx(t, "GET /admin/v1/activities"), 2, cursor)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, a := range page.Activities {
			got = append(got, a.ActivityID)
			if a.ActivityID == 3 {
				it := a.Items[0]
				if it.Sold != 1 || it.Stock != 29 || it.RedisStock == nil || *it.RedisStock != 29 || it.InFlight == nil || *it.InFlight != 0 {
					t.Errorf("activity 3's item in the list: %+v (redisStock %v, inFlight %v), want sold 1, stock 29, redisStock 29, inFlight 0",
						it, deref(it.RedisStock), deref(it.InFlight))
				}
			}
		}
		cursor = page.NextCursor
		if cursor == "" {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("listed %v, want %v (newest start first, ties by the higher id, each once)", got, want)
	}
	if page, err := p.api().ListActivities(contractCtx(t, "GET /admin/v1/activities"), 0, ""); err != nil || len(page.Activities) != 5 || page.NextCursor != "" {
		t.Errorf("the default page: %d activities, next %q, %v; want all 5 and no nextCursor", len(page.Activities), page.NextCursor, err)
	}
	// Paging input is HTTP's own subject: the raw query string.
	auth := []string{"Authorization", "Bearer " + p.Admin}
	for _, bad := range []string{"limit=0", "limit=101", "limit=x", "limit=%2B5", "limit=05", "limit=1&limit=2", "cursor=nope", "cursor=", "page=2"} {
		if r := p.do(t, http.MethodGet, "/admin/v1/activities?"+bad, "", nil, auth...); r.Status != http.StatusBadRequest || r.Code() != "INVALID_REQUEST" {
			t.Errorf("list with %s: %d %v, want 400 INVALID_REQUEST", bad, r.Status, r.Body)
		}
	}
	if r := p.do(t, http.MethodGet, "/admin/v1/activities", "", nil); r.Status != http.StatusUnauthorized {
		t.Errorf("list without the token: %d, want 401", r.Status)
	}
}
