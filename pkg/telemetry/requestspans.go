package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A request the gateway refused (409, 429, a 400 for its payload) leaves
// nothing in Redis or Postgres, so no record names its trace; its spans do:
// the gateway's server span carries order.request_id whatever the answer.
// RequestSpans and QueryRequestSpans find them by that attribute, so
// `orderpipe locate` can show the trace of any request that was sampled.

// RequestSpans are the spans in the local store (dir) whose
// order.request_id is requestID, in no particular order.
func RequestSpans(dir, requestID string) ([]StoredSpan, error) {
	files, err := filepath.Glob(filepath.Join(dir, "spans-*.jsonl"))
	if err != nil {
		return nil, err
	}
	// The attribute as the store writes it (encoding/json, no spaces); a
	// requestId holds no character JSON escapes.
	needle := `"` + string(AttrRequestID) + `":"` + requestID + `"`
	var lines []StoredSpan
	for _, name := range files {
		if err := scanFile(name, needle, &lines); err != nil {
			return nil, err
		}
	}
	return ofRequest(lines, requestID), nil
}

func ofRequest(spans []StoredSpan, requestID string) []StoredSpan {
	var out []StoredSpan
	for _, s := range spans {
		if s.Attrs[string(AttrRequestID)] == requestID {
			out = append(out, s)
		}
	}
	return out
}

// requestSearchWindow is how far back QueryRequestSpans asks Jaeger to look
// (the dedup record, which names an accepted request's trace, lives at
// least a day).
const requestSearchWindow = 48 * time.Hour

// QueryRequestSpans asks the Jaeger query service at baseURL for the spans
// whose order.request_id is requestID, within requestSearchWindow: Jaeger
// searches per service, so every service whose name begins with
// "orderpipe" is asked (GET /api/services, then GET /api/traces?service=…&tags=…).
func QueryRequestSpans(ctx context.Context, client *http.Client, baseURL, requestID string) ([]StoredSpan, error) {
	if client == nil {
		client = http.DefaultClient
	}
	base := strings.TrimRight(baseURL, "/")
	body, err := getJSON(ctx, client, base+"/api/services", false)
	if err != nil {
		return nil, err
	}
	var services struct {
		Data []string `json:"data"`
	}
	if err := json.Unmarshal(body, &services); err != nil {
		return nil, fmt.Errorf("GET %s/api/services: %w", redactedURL(base), err)
	}
	tags, _ := json.Marshal(map[string]string{string(AttrRequestID): requestID})
	end := time.Now()
	var out []StoredSpan
	for _, svc := range services.Data {
		if !strings.HasPrefix(svc, "orderpipe") {
			continue
		}
		q := url.Values{"service": {svc}, "tags": {string(tags)}, "limit": {"20"},
			"start": {strconv.FormatInt(end.Add(-requestSearchWindow).UnixMicro(), 10)}, "end": {strconv.FormatInt(end.UnixMicro(), 10)}}
		body, err := getJSON(ctx, client, base+"/api/traces?"+q.Encode(), false)
		if err != nil {
			return out, err
		}
		spans, err := JaegerSpans(body)
		if err != nil {
			return out, fmt.Errorf("searching %s for %s: %w", redactedURL(base), requestID, err)
		}
		out = append(out, ofRequest(spans, requestID)...)
	}
	return out, nil
}

// GatewayAnswer is the latest of spans' gateway server spans (the HTTP
// answers to the request, retries included): its trace id and the status
// it answered; ok false when spans hold none.
func GatewayAnswer(spans []StoredSpan) (traceID string, status string, ok bool) {
	var last StoredSpan
	for _, s := range spans {
		if strings.EqualFold(s.Kind, "server") && (!ok || s.Start.After(last.Start)) {
			last, ok = s, true
		}
	}
	return last.TraceID, last.Attrs["http.response.status_code"], ok
}
