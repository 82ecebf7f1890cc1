package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/testenv"
)

// TestContractFloor: with -contract an accepted order goes through the
// whole of the worker's side of the contract — recorded once in the
// idempotency table, its stock taken in Postgres, its UNPAID event written
// to the outbox and published — against a real Redis and Postgres; a retry
// of the requestId is answered 200 and creates nothing more.
func TestContractFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := testenv.MustRedis(t)
	db := testenv.MustDatabase(t)
	t.Cleanup(func() {
		// The pool's next check-out finds the schema as migrated.
		db.Pool.Exec(ctx, `DROP TABLE IF EXISTS floor_orders, floor_c_processed, floor_c_stock, floor_c_orders, floor_c_events`) //nolint:errcheck
	})
	addr := testenv.FreeAddr(t)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(rctx, addr, testenv.RedisAddr(), db.URL, r.Prefix, 10, true) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	post := func(rid string, user int) int {
		t.Helper()
		body := `{"requestId":"` + rid + `","userId":` + string(rune('0'+user)) + `,"activityId":4,"itemId":5,"quantity":2}`
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			resp, err := http.Post("http://"+addr+"/v1/orders", "application/json", strings.NewReader(body))
			if err == nil {
				resp.Body.Close()
				return resp.StatusCode
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		rid    string
		user   int
		status int
	}{{"a", 1, http.StatusAccepted}, {"b", 2, http.StatusAccepted}, {"a", 1, http.StatusOK}} {
		if got := post(c.rid, c.user); got != c.status {
			t.Fatalf("%s: %d, want %d", c.rid, got, c.status)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "both events published and the stock taken", func() bool {
		var published, processed, orders int
		var stock int64
		err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM floor_c_events WHERE published_at IS NOT NULL),
			(SELECT count(*) FROM floor_c_processed), (SELECT count(*) FROM floor_c_orders),
			(SELECT stock FROM floor_c_stock WHERE activity_id = 4 AND item_id = 5)`).Scan(&published, &processed, &orders, &stock)
		return err == nil && published == 2 && processed == 2 && orders == 2 && stock == 6
	})
}
