package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/testenv"
)

// TestRefuseFloor: the refusal's floor answers a new requestId of a live
// sale SOLD_OUT, an ended sale's NOT_ON_SALE, and decides nothing it would
// have to run the script for (a requestId Redis knows) or cannot read —
// each checked against a real Redis, coalesced and alone.
func TestRefuseFloor(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	for _, alone := range []bool{false, true} {
		r := testenv.MustRedis(t)
		addr := serveFloor(t, func(ctx context.Context, addr string) error {
			return runRefuse(ctx, addr, testenv.RedisAddr(), r.Prefix, alone)
		})
		if err := r.Client.Set(bg, r.Prefix+"req:{a1:i2}:known", "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.Client.HSet(bg, r.Prefix+"sale:{a3:i2}", "ended", "1").Err(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name, body string
			status     int
			code       string
		}{
			{"new requestId", orderBody("fresh", 7, 1, 1), http.StatusConflict, "SOLD_OUT"},
			{"known requestId", orderBody("known", 7, 1, 1), http.StatusServiceUnavailable, "UNAVAILABLE"},
			{"ended sale", orderBody("fresh", 7, 3, 1), http.StatusConflict, "NOT_ON_SALE"},
			{"no requestId", `{"userId":7,"activityId":1,"itemId":2,"quantity":1}`, http.StatusBadRequest, "INVALID_REQUEST"},
			{"too long", `{"requestId":"` + strings.Repeat("x", 5000) + `","activityId":1,"itemId":2}`, http.StatusBadRequest, "INVALID_REQUEST"},
		} {
			status, body := postOrder(t, addr, c.body)
			if status != c.status || !strings.Contains(body, `"code":"`+c.code+`"`) {
				t.Errorf("alone=%v, %s: %d %s, want %d %s", alone, c.name, status, body, c.status, c.code)
			}
		}
	}
}

// TestContractFloor: with -contract an accepted order goes through the
// whole of the worker's side of the contract — recorded once in the
// idempotency table, its stock taken in Postgres, its UNPAID event written
// to the outbox and published — against a real Redis and Postgres; a retry
// of the requestId is answered 200 and creates nothing more.
func TestContractFloor(t *testing.T) {
	t.Parallel()
	r := testenv.MustRedis(t)
	db := testenv.MustDatabase(t)
	t.Cleanup(func() {
		// The pool's next check-out finds the schema as migrated.
		db.Pool.Exec(context.Background(), `DROP TABLE IF EXISTS floor_orders, floor_c_processed, floor_c_stock, floor_c_orders, floor_c_events`) //nolint:errcheck
	})
	addr := serveFloor(t, func(ctx context.Context, addr string) error {
		return run(ctx, addr, testenv.RedisAddr(), db.URL, r.Prefix, 10, true)
	})
	for _, c := range []struct {
		rid    string
		user   int
		status int
	}{{"a", 1, http.StatusAccepted}, {"b", 2, http.StatusAccepted}, {"a", 1, http.StatusOK}} {
		if got, body := postOrder(t, addr, orderBody(c.rid, c.user, 4, 2)); got != c.status {
			t.Fatalf("%s: %d %s, want %d", c.rid, got, body, c.status)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "both events published and the stock taken", func() bool {
		var published, processed, orders int
		var stock int64
		err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM floor_c_events WHERE published_at IS NOT NULL),
			(SELECT count(*) FROM floor_c_processed), (SELECT count(*) FROM floor_c_orders),
			(SELECT stock FROM floor_c_stock WHERE activity_id = 4 AND item_id = 2)`).Scan(&published, &processed, &orders, &stock)
		return err == nil && published == 2 && processed == 2 && orders == 2 && stock == 6
	})
}

func TestField(t *testing.T) {
	t.Parallel()
	body := []byte(`{"requestId":"r-1","userId":7,"activityId":12,"itemId":3}`)
	for name, want := range map[string]string{"requestId": `"r-1"`, "userId": "7", "itemId": "3", "quantity": ""} {
		if got := string(field(body, name)); got != want {
			t.Errorf("field %s: %q, want %q", name, got, want)
		}
	}
}

// serveFloor runs a floor on a free address until the test ends, and
// fails the test if it ended with an error.
func serveFloor(t *testing.T, serve func(ctx context.Context, addr string) error) string {
	t.Helper()
	addr := testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, addr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the floor on %s: %v", addr, err)
		}
	})
	return addr
}

// orderBody is an order request of quantity q.
func orderBody(rid string, user, activity, q int) string {
	return `{"requestId":"` + rid + `","userId":` + strconv.Itoa(user) + `,"activityId":` + strconv.Itoa(activity) +
		`,"itemId":2,"quantity":` + strconv.Itoa(q) + `}`
}

// postOrder posts body to the floor at addr, retrying while it does not
// listen yet, and returns the answer's status and body.
func postOrder(t *testing.T, addr, body string) (int, string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Post("http://"+addr+"/v1/orders", "application/json", strings.NewReader(body))
		if err == nil {
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}
