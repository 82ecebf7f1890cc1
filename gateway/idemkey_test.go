package gateway

import (
	"net/http"
	"strings"
	"testing"
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
