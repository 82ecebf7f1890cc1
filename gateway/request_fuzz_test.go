package gateway

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParseOrderRequest: whatever the body and content type, decoding never
// panics and never answers anything but a 4xx with a code and a message.
// `make fuzz` runs it for a while; `go test` runs the seed corpus.
func FuzzParseOrderRequest(f *testing.F) {
	seeds := []string{
		`{"requestId":"r-123","userId":42,"activityId":1,"itemId":10086,"quantity":1}`,
		`{"requestId":"r-123","userId":42,"activityId":1,"itemId":10086,"quantity":1}{}`,
		`{"requestId":"","userId":-1,"activityId":0,"itemId":1e99,"quantity":1.5}`,
		`{"requestId":"r","userId":9223372036854775807,"activityId":1,"itemId":1,"quantity":100,"x":1}`,
		`[]`, `null`, `"str"`, `{`, ``, "\x00\xff", `{"requestId":"\u0000"}`,
		`{"requestId":"` + strings.Repeat("a", 5000) + `"}`,
	}
	for _, s := range seeds {
		f.Add("application/json", []byte(s))
	}
	f.Add("application/json; charset=utf-8", []byte(seeds[0]))
	f.Add("text/plain", []byte(seeds[0]))
	f.Add("", []byte(seeds[0]))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		req, apiErr := parseOrderRequest(contentType, bytes.NewReader(body))
		if apiErr == nil {
			if validRequestID(req.RequestID) != nil || req.UserID <= 0 || req.ActivityID <= 0 || req.ItemID <= 0 ||
				req.Quantity < 1 || req.Quantity > 100 || len(body) > MaxBodyBytes {
				t.Fatalf("accepted an invalid request %+v from %q", req, body)
			}
			return
		}
		if apiErr.Status < 400 || apiErr.Status > 499 || apiErr.Code == "" || apiErr.Message == "" {
			t.Fatalf("bad rejection %+v for %q", apiErr, body)
		}
	})
}
