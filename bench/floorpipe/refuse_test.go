package main

import (
	"context"
	"io"
	"net/http"
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
	for _, alone := range []bool{false, true} {
		r := testenv.MustRedis(t)
		addr := testenv.FreeAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- runRefuse(ctx, addr, testenv.RedisAddr(), r.Prefix, alone) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil && err != http.ErrServerClosed {
				t.Errorf("runRefuse: %v", err)
			}
		})
		post := func(body string) (int, string) {
			t.Helper()
			var resp *http.Response
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				resp, err = http.Post("http://"+addr+"/v1/orders", "application/json", strings.NewReader(body))
				if err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatalf("alone=%v: %v", alone, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		order := func(rid string, activity int) string {
			return `{"requestId":"` + rid + `","userId":7,"activityId":` + string(rune('0'+activity)) + `,"itemId":2,"quantity":1}`
		}
		bg := context.Background()
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
			{"new requestId", order("fresh", 1), http.StatusConflict, "SOLD_OUT"},
			{"known requestId", order("known", 1), http.StatusServiceUnavailable, "UNAVAILABLE"},
			{"ended sale", order("fresh", 3), http.StatusConflict, "NOT_ON_SALE"},
			{"no requestId", `{"userId":7,"activityId":1,"itemId":2,"quantity":1}`, http.StatusBadRequest, "INVALID_REQUEST"},
			{"too long", `{"requestId":"` + strings.Repeat("x", 5000) + `","activityId":1,"itemId":2}`, http.StatusBadRequest, "INVALID_REQUEST"},
		} {
			status, body := post(c.body)
			if status != c.status || !strings.Contains(body, `"code":"`+c.code+`"`) {
				t.Errorf("alone=%v, %s: %d %s, want %d %s", alone, c.name, status, body, c.status, c.code)
			}
		}
	}
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
