package gateway

import (
	"bytes"
	"testing"
)

// BenchmarkParseOrderRequest measures the gateway's decode and validation of
// one POST /v1/orders body, the CPU the hot path spends before Redis.
func BenchmarkParseOrderRequest(b *testing.B) {
	cases := []struct {
		name  string
		body  string
		valid bool
	}{
		{"Valid", `{"requestId":"r-7f3a9c2e-0001","userId":123456789,"activityId":1,"itemId":10086,"quantity":1}`, true},
		{"UnknownField", `{"requestId":"r-1","userId":1,"activityId":1,"itemId":1,"quantity":1,"coupon":"x"}`, false},
		{"Malformed", `{"requestId":"r-1","userId":1,`, false},
		{"BadRequestID", `{"requestId":"r 1/2","userId":1,"activityId":1,"itemId":1,"quantity":1}`, false},
	}
	for _, c := range cases {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				_, apiErr := parseOrderRequest("application/json", bytes.NewReader(body))
				if (apiErr == nil) != c.valid {
					b.Fatalf("parse %s: %v", c.body, apiErr)
				}
			}
		})
	}
}
