package gateway

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// TestIdempotencyKeyHeader: the draft's quoted sf-string and a bare key are
// the same key; anything outside the requestId rules, or the header twice,
// is 400 naming the header.
func TestIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		values []string
		want   string
		bad    bool
	}{
		{"None", nil, "", false},
		{"Quoted", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", false},
		{"Bare", []string{"r-123"}, "r-123", false},
		{"Padded", []string{` "r:1.2_3" `}, "r:1.2_3", false},
		{"Max", []string{`"` + strings.Repeat("a", 64) + `"`}, strings.Repeat("a", 64), false},
		{"TooLong", []string{strings.Repeat("a", 65)}, "", true},
		{"EmptyQuoted", []string{`""`}, "", true},
		{"Empty", []string{""}, "", true},
		{"Unterminated", []string{`"r-1`}, "", true},
		{"Escape", []string{`"r\"1"`}, "", true},
		{"Space", []string{`"r 1"`}, "", true},
		{"List", []string{`"a", "b"`}, "", true},
		{"Twice", []string{`"a"`, `"a"`}, "", true},
		{"Param", []string{`"a";x=1`}, "", true},
		{"NotASCII", []string{`"é"`}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range c.values {
				h.Add(IdempotencyKeyHeader, v)
			}
			got, apiErr := idempotencyKey(h)
			if c.bad {
				if apiErr == nil || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, "Idempotency-Key") {
					t.Fatalf("%q: %q %v, want 400 naming Idempotency-Key", c.values, got, apiErr)
				}
				return
			}
			if apiErr != nil || got != c.want {
				t.Fatalf("%q: %q %v, want %q", c.values, got, apiErr, c.want)
			}
		})
	}
}

// TestKeyedOrderRequest: the key is the requestId; the body may omit it,
// not contradict it.
func TestKeyedOrderRequest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body, key, want string
	}{
		{"BodyOnly", `{"requestId":"r-1","userId":1,"activityId":1,"itemId":1,"quantity":1}`, "", "r-1"},
		{"KeyOnly", `{"userId":1,"activityId":1,"itemId":1,"quantity":1}`, "k-1", "k-1"},
		{"Both", `{"requestId":"k-1","userId":1,"activityId":1,"itemId":1,"quantity":1}`, "k-1", "k-1"},
		{"Differ", `{"requestId":"r-1","userId":1,"activityId":1,"itemId":1,"quantity":1}`, "k-1", ""},
		{"Neither", `{"userId":1,"activityId":1,"itemId":1,"quantity":1}`, "", ""},
		// An empty requestId is not a missing one: with a key it differs
		// (make fuzz-api's find: it was taken as absent and replayed).
		{"EmptyBodyWithKey", `{"requestId":"","userId":1,"activityId":1,"itemId":1,"quantity":1}`, "k-1", ""},
		{"EmptyBodyAlone", `{"requestId":"","userId":1,"activityId":1,"itemId":1,"quantity":1}`, "", ""},
		{"NullBodyWithKey", `{"requestId":null,"userId":1,"activityId":1,"itemId":1,"quantity":1}`, "k-1", ""},
		{"NumberBodyWithKey", `{"requestId":7,"userId":1,"activityId":1,"itemId":1,"quantity":1}`, "k-1", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, apiErr := parseKeyedOrderRequest("application/json", strings.NewReader(c.body), c.key)
			if c.want == "" {
				if apiErr == nil || apiErr.Status != http.StatusBadRequest {
					t.Fatalf("%s with key %q: %+v %v, want 400", c.body, c.key, req, apiErr)
				}
				return
			}
			if apiErr != nil || req.RequestID != c.want || req.keyed != (c.key != "") {
				t.Fatalf("%s with key %q: %+v %v, want requestId %q", c.body, c.key, req, apiErr, c.want)
			}
		})
	}
}

// TestKeyedPayFailsClosedWithoutRedis: a pay or cancel with a key whose
// store (Redis) cannot be reached is 503 before anything is done — here
// no order store at all is wired, so any step past the key would panic.
func TestKeyedPayFailsClosedWithoutRedis(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	rdb := testenv.RedisClient(t, dead, time.Second)
	s := New(Config{ReserveTimeout: 2 * time.Second},
		Deps{Stock: stock.New(rdb, "dead:"), Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, c := range []struct{ path, body string }{
		{"/v1/orders/1-1-mx1ir84j7901087d0b53/pay", ""},
		{"/v1/orders/1-1-mx1ir84j7901087d0b53/cancel", `{"userId":1}`},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+c.path, strings.NewReader(c.body))
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set(IdempotencyKeyHeader, `"k-1"`)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || errorCode(string(b)) != "UNAVAILABLE" || res.Header.Get("Retry-After") == "" {
			t.Errorf("%s with a key, Redis down: %d %s, want 503 UNAVAILABLE with Retry-After", c.path, res.StatusCode, b)
		}
	}
}
