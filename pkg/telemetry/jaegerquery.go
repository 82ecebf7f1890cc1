package telemetry

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxJaegerBody bounds one trace document read from the query service (a
// batch trace of 500 messages is well under it).
const maxJaegerBody = 32 << 20

// jaegerDoc is the Jaeger query service's answer to GET /api/traces/{id}
// (the JSON the Jaeger UI reads, unchanged in Jaeger v2).
type jaegerDoc struct {
	Data   []jaegerTrace `json:"data"`
	Errors []struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"errors"`
}

type jaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []jaegerSpan             `json:"spans"`
	Processes map[string]jaegerProcess `json:"processes"`
}

type jaegerSpan struct {
	TraceID       string         `json:"traceID"`
	SpanID        string         `json:"spanID"`
	ParentSpanID  string         `json:"parentSpanID"` // deprecated by references; older documents
	OperationName string         `json:"operationName"`
	References    []jaegerRef    `json:"references"`
	StartTime     int64          `json:"startTime"` // µs since the epoch
	Duration      int64          `json:"duration"`  // µs
	Tags          []jaegerTag    `json:"tags"`
	ProcessID     string         `json:"processID"`
	Process       *jaegerProcess `json:"process"` // inline instead of processID (older documents)
}

type jaegerRef struct {
	RefType string `json:"refType"` // CHILD_OF or FOLLOWS_FROM
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

type jaegerTag struct {
	Key   string          `json:"key"`
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

type jaegerProcess struct {
	ServiceName string      `json:"serviceName"`
	Tags        []jaegerTag `json:"tags"`
}

// jaegerOnlyTags are tags Jaeger derives from the span's kind, status and
// instrumentation scope: they become StoredSpan fields or are dropped, so
// Attrs holds the span's own attributes, as in the local store.
var jaegerOnlyTags = map[string]bool{
	"span.kind": true, "otel.status_code": true, "otel.status_description": true, "error": true,
	"otel.scope.name": true, "otel.scope.version": true, "otel.library.name": true, "otel.library.version": true,
	"internal.span.format": true,
}

// JaegerSpans converts a Jaeger query document (GET /api/traces/{id}) into
// the spans the local span store yields: the first CHILD_OF reference in the
// same trace is the parent; every other reference (FOLLOWS_FROM, which is
// what Jaeger makes of an OpenTelemetry span link, or one into another
// trace) is a link. Jaeger writes trace ids without the leading zeros of
// their high half; they are padded back to 32 hex digits.
func JaegerSpans(doc []byte) ([]StoredSpan, error) {
	var d jaegerDoc
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("decoding the Jaeger trace: %w", err)
	}
	var out []StoredSpan
	for _, tr := range d.Data {
		for _, js := range tr.Spans {
			out = append(out, storedSpanOf(tr, js))
		}
	}
	return out, nil
}

// storedSpanOf converts one span of the trace tr.
func storedSpanOf(tr jaegerTrace, js jaegerSpan) StoredSpan {
	s := StoredSpan{TraceID: padID(cmp.Or(js.TraceID, tr.TraceID), 32), SpanID: padID(js.SpanID, 16),
		Name: js.OperationName, Kind: "internal", Start: time.UnixMicro(js.StartTime).UTC()}
	s.End = s.Start.Add(time.Duration(js.Duration) * time.Microsecond)
	if p, ok := tr.Processes[js.ProcessID]; ok {
		s.Service = p.ServiceName
	} else if js.Process != nil {
		s.Service = js.Process.ServiceName
	}
	s.readReferences(js)
	for _, t := range js.Tags {
		s.readTag(t.Key, tagValue(t.Value))
	}
	return s
}

// readReferences sets the parent and the links from the span's references
// (or, in an older document without them, its parentSpanID).
func (s *StoredSpan) readReferences(js jaegerSpan) {
	for _, r := range js.References {
		tid, sid := padID(r.TraceID, 32), padID(r.SpanID, 16)
		if r.RefType == "CHILD_OF" && s.ParentID == "" && tid == s.TraceID {
			s.ParentID = sid
			continue
		}
		s.Links = append(s.Links, tid+"-"+sid)
	}
	if s.ParentID == "" && js.ParentSpanID != "" && len(js.References) == 0 {
		s.ParentID = padID(js.ParentSpanID, 16)
	}
}

// readTag reads one tag: the kind and the error status Jaeger writes as
// tags become fields, and the span's own attributes stay in Attrs.
func (s *StoredSpan) readTag(key, v string) {
	switch key {
	case "span.kind":
		s.Kind = v
	case "otel.status_code":
		if strings.EqualFold(v, "ERROR") {
			s.Status = "Error"
		}
	case "error":
		if v == "true" {
			s.Status = "Error"
		}
	}
	if jaegerOnlyTags[key] {
		return
	}
	if s.Attrs == nil {
		s.Attrs = map[string]string{}
	}
	s.Attrs[key] = v
}

// tagValue is a tag's value as text: a string unquoted, a number or bool as
// written.
func tagValue(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// padID restores the leading zeros Jaeger drops (lower case, n hex digits).
func padID(id string, n int) string {
	id = strings.ToLower(id)
	if len(id) < n {
		id = strings.Repeat("0", n-len(id)) + id
	}
	return id
}

// QueryTrace reads one trace from the Jaeger query service at baseURL
// (GET {baseURL}/api/traces/{traceID}), plus, one level, the traces its
// spans link to: the worker's batch span, with the Postgres and Redis spans
// under it, lives in a trace of its own, which each message's process span
// links (FOLLOWS_FROM). A trace Jaeger does not have (404: not sampled, not
// exported yet, or past its retention) is no spans, not an error. The
// spans read before an error are returned with it; ctx bounds it all.
func QueryTrace(ctx context.Context, client *http.Client, baseURL, traceID string) ([]StoredSpan, error) {
	if client == nil {
		client = http.DefaultClient
	}
	spans, err := queryOne(ctx, client, baseURL, traceID)
	if err != nil {
		return nil, err
	}
	traceID = padID(traceID, 32)
	var linked []string
	seen := map[string]bool{traceID: true}
	out := make([]StoredSpan, 0, len(spans))
	for _, s := range spans {
		if s.TraceID != traceID {
			continue
		}
		out = append(out, s)
		for _, l := range s.Links {
			if t, _, _ := strings.Cut(l, "-"); !seen[t] {
				seen[t] = true
				linked = append(linked, t)
			}
		}
	}
	for _, t := range linked {
		more, err := queryOne(ctx, client, baseURL, t)
		if err != nil {
			return out, err
		}
		for _, s := range more {
			if s.TraceID == t {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

func queryOne(ctx context.Context, client *http.Client, baseURL, traceID string) ([]StoredSpan, error) {
	u := strings.TrimRight(baseURL, "/") + "/api/traces/" + url.PathEscape(traceID)
	body, err := getJSON(ctx, client, u, true)
	if err != nil || body == nil {
		return nil, err
	}
	spans, err := JaegerSpans(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", redactedURL(u), err)
	}
	return spans, nil
}

// getJSON is GET u's body, within maxJaegerBody: a 200's, or (notFoundOK)
// nil for a 404; any other answer is an error quoting it.
func getJSON(ctx context.Context, client *http.Client, u string, notFoundOK bool) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return nil, fmt.Errorf("GET %s: %w", redactedURL(ue.URL), ue.Err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJaegerBody))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading the answer: %w", redactedURL(u), err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && notFoundOK:
		return nil, nil
	case resp.StatusCode != http.StatusOK:
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		return nil, fmt.Errorf("GET %s: HTTP %s: %s", redactedURL(u), strconv.Itoa(resp.StatusCode), msg)
	}
	return body, nil
}

func redactedURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}
