package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The testdata documents are what Jaeger v2's query service answers to GET
// /api/traces/{id} for one order (written by hand after its JSON: span kind,
// status and scope as tags, links as FOLLOWS_FROM references, the processes
// table, the high half's leading zeros dropped from trace ids): the
// request's trace (gateway server span → redis → send → the worker's process
// span, which links the batch) and the worker's batch trace (batch span →
// claim, BEGIN/INSERT/UPDATE/COMMIT, ack; it links every message's send span).
const (
	jaegerRequestTrace = "0af7651916cd43dd8448eb211c80319c"
	jaegerBatchTrace   = "00c4a9e6f1d2b3a45e6f708192a3b4c5" // "c4a9e6f1d2b3a45e6f708192a3b4c5" in the documents
)

func mustRead(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func spanByID(tb testing.TB, spans []StoredSpan, id string) StoredSpan {
	tb.Helper()
	for _, s := range spans {
		if s.SpanID == id {
			return s
		}
	}
	tb.Fatalf("no span %s among %d", id, len(spans))
	return StoredSpan{}
}

// TestJaegerSpansConvertsTheQueryDocument: every field the span tree and
// --json read comes across as the local store writes it.
func TestJaegerSpansConvertsTheQueryDocument(t *testing.T) {
	spans, err := JaegerSpans(mustRead(t, "testdata/jaeger-trace-request.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	server := spanByID(t, spans, "53995c3f42cd8ad8")
	start := time.Date(2026, 1, 14, 12, 0, 0, 123456000, time.UTC)
	if server.TraceID != jaegerRequestTrace || server.Name != "POST /v1/orders" || server.Kind != "server" ||
		server.Service != "orderpipe-gateway" || !server.Start.Equal(start) || server.Duration() != 5330*time.Microsecond ||
		server.ParentID != "b7ad6b7169203331" || server.Status != "" || len(server.Links) != 0 {
		t.Errorf("server span: %+v", server)
	}
	if server.Attrs["http.route"] != "/v1/orders" || server.Attrs["http.response.status_code"] != "202" ||
		server.Attrs["order.request_id"] != "jaeger-1" {
		t.Errorf("server span attributes: %v", server.Attrs)
	}
	for _, k := range []string{"span.kind", "otel.scope.name", "otel.scope.version"} {
		if _, ok := server.Attrs[k]; ok {
			t.Errorf("attribute %s is Jaeger's, not the span's: %v", k, server.Attrs)
		}
	}
	process := spanByID(t, spans, "7d3e9a1b2c4f5061")
	if process.Kind != "consumer" || process.Service != "orderpipe-worker" || process.ParentID != "a1b2c3d4e5f60718" ||
		!slices.Equal(process.Links, []string{jaegerBatchTrace + "-e4d3c2b1a0918273"}) {
		t.Errorf("process span: %+v", process)
	}

	batch, err := JaegerSpans(mustRead(t, "testdata/jaeger-trace-batch.json"))
	if err != nil {
		t.Fatal(err)
	}
	b := spanByID(t, batch, "e4d3c2b1a0918273")
	if b.TraceID != jaegerBatchTrace || b.ParentID != "" || b.Name != "process orders.requested batch" ||
		!slices.Equal(b.Links, []string{jaegerRequestTrace + "-a1b2c3d4e5f60718", "9b2e4f6a8c0d1e3f5a7b9c1d3e5f7a9b-3c5e7a9b1d3f5a7c"}) {
		t.Errorf("batch span: %+v", b)
	}
	if c := spanByID(t, batch, "5e6f7a8b9cadbecf"); c.Name != "COMMIT" || c.ParentID != b.SpanID || c.Kind != "client" {
		t.Errorf("commit span: %+v", c)
	}
}

// TestJaegerSpansStatusAndOlderForms: a failed span (otel.status_code
// ERROR, or the error tag alone), an inline process and the deprecated
// parentSpanID field.
func TestJaegerSpansStatusAndOlderForms(t *testing.T) {
	doc := `{"data":[{"traceID":"1","spans":[
		{"spanID":"a","operationName":"release","startTime":1,"duration":2,"processID":"p1",
		 "tags":[{"key":"otel.status_code","type":"string","value":"ERROR"},{"key":"error","type":"bool","value":true},{"key":"span.kind","type":"string","value":"internal"}]},
		{"traceID":"1","spanID":"b","parentSpanID":"a","operationName":"x","startTime":1,"duration":1,
		 "process":{"serviceName":"old"},"tags":[{"key":"error","type":"bool","value":true}]}],
		"processes":{"p1":{"serviceName":"orderpipe-closer"}}}]}`
	spans, err := JaegerSpans([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	a, b := spans[0], spans[1]
	if a.TraceID != "00000000000000000000000000000001" || a.SpanID != "000000000000000a" || a.Status != "Error" ||
		a.Kind != "internal" || a.Service != "orderpipe-closer" || a.Attrs != nil {
		t.Errorf("a: %+v", a)
	}
	if b.ParentID != "000000000000000a" || b.Service != "old" || b.Status != "Error" || b.Kind != "internal" {
		t.Errorf("b: %+v", b)
	}
	if _, err := JaegerSpans([]byte(`<html>`)); err == nil {
		t.Error("not JSON: no error")
	}
}

// jaegerServer serves the testdata documents at /api/traces/{id} as the
// Jaeger query service does (404 for a trace it does not have) and records
// the ids asked for.
type jaegerServer struct {
	*httptest.Server
	mu    sync.Mutex
	asked []string
}

func newJaegerServer(tb testing.TB) *jaegerServer {
	docs := map[string][]byte{
		jaegerRequestTrace: mustRead(tb, "testdata/jaeger-trace-request.json"),
		jaegerBatchTrace:   mustRead(tb, "testdata/jaeger-trace-batch.json"),
	}
	s := &jaegerServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/api/traces/")
		s.mu.Lock()
		s.asked = append(s.asked, id)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if doc := docs[id]; ok && doc != nil {
			_, _ = w.Write(doc)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"data":null,"total":0,"limit":0,"offset":0,"errors":[{"code":404,"msg":"trace not found"}]}`))
	}))
	tb.Cleanup(s.Close)
	return s
}

// Asked is the trace ids asked for so far.
func (s *jaegerServer) Asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.asked)
}

// TestQueryTraceFollowsLinksOneLevel: the request's trace, then the batch
// trace its process span links, and not the other message's trace the
// batch links (one level, as the local store reads).
func TestQueryTraceFollowsLinksOneLevel(t *testing.T) {
	srv := newJaegerServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	spans, err := QueryTrace(ctx, srv.Client(), srv.URL+"/", jaegerRequestTrace)
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 11 {
		t.Errorf("%d spans, want 4 of the request's trace and 7 of the batch's", len(spans))
	}
	if want := []string{jaegerRequestTrace, jaegerBatchTrace}; !slices.Equal(srv.Asked(), want) {
		t.Errorf("asked for %v, want %v", srv.Asked(), want)
	}

	none, err := QueryTrace(ctx, srv.Client(), srv.URL, "4bf92f3577b34da6a3ce929d0e0e4736")
	if err != nil || len(none) != 0 {
		t.Errorf("a trace Jaeger lacks: %d spans, %v; want none and no error", len(none), err)
	}
}

// TestQueryTraceErrors: an answer other than 200/404, a server that does
// not answer within the context's bound, and nothing listening are errors.
func TestQueryTraceErrors(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "storage unavailable", http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hanging.Close()
	defer close(release)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	for name, c := range map[string]struct{ url, want string }{
		"503":     {failing.URL, "HTTP 503: storage unavailable"},
		"hanging": {hanging.URL, "context deadline exceeded"},
		"closed":  {closed.URL, "connection refused"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t0 := time.Now()
		_, err := QueryTrace(ctx, nil, c.url, jaegerRequestTrace)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
		if time.Since(t0) > 3*time.Second {
			t.Errorf("%s: took %v, past the context's bound", name, time.Since(t0))
		}
	}
}

// TestQueryRequestSpans: a request is searched in Jaeger by its
// order.request_id tag, in every orderpipe service Jaeger lists (not the
// others), within a window ending now; the latest server span gives the
// trace and the gateway's answer.
func TestQueryRequestSpans(t *testing.T) {
	doc := mustRead(t, "testdata/jaeger-trace-request.json")
	var mu sync.Mutex
	var searched []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/services":
			_, _ = w.Write([]byte(`{"data":["orderpipe-gateway","orderpipe-worker","jaeger"],"total":3}`))
		case "/api/traces":
			q := r.URL.Query()
			mu.Lock()
			searched = append(searched, q.Get("service"))
			mu.Unlock()
			start, _ := strconv.ParseInt(q.Get("start"), 10, 64)
			end, _ := strconv.ParseInt(q.Get("end"), 10, 64)
			if q.Get("tags") != `{"order.request_id":"jaeger-1"}` || end <= start || time.Since(time.UnixMicro(end)) > time.Minute {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			if q.Get("service") == "orderpipe-gateway" {
				_, _ = w.Write(doc)
				return
			}
			_, _ = w.Write([]byte(`{"data":[],"total":0}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	spans, err := QueryRequestSpans(ctx, srv.Client(), srv.URL, "jaeger-1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(searched, []string{"orderpipe-gateway", "orderpipe-worker"}) {
		t.Errorf("searched services %v, want the two orderpipe ones", searched)
	}
	trace, status, ok := GatewayAnswer(spans)
	if !ok || trace != jaegerRequestTrace || status != "202" {
		t.Errorf("gateway answer %s %s %v from %d spans, want %s 202", trace, status, ok, len(spans), jaegerRequestTrace)
	}
	if none, err := QueryRequestSpans(ctx, srv.Client(), srv.URL, "other"); err == nil || len(none) != 0 {
		t.Errorf("a search Jaeger refuses: %d spans, %v; want an error", len(none), err)
	}
}
