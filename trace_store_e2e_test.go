package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
	"orderpipe/reconciler/locate"
)

// mustSpanStore installs, as the global tracer provider (always sampling),
// the local span store's exporter writing to a fresh directory, as
// TRACE_STORE_DIR makes SetupTracing do; restored at cleanup. Synchronous
// export: a span is in the file once it has ended. Process-wide, like
// mustRecordSpans: a test that calls it stays serial.
func mustSpanStore(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	exp, err := telemetry.NewFileExporter(dir, "orderpipe-all")
	if err != nil {
		tb.Fatal(err)
	}
	mustInstallTracing(tb, telemetry.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("orderpipe-all")))))
	return dir
}

// testLocatePrintsSpanTree: with the local span store on, `orderpipe
// locate` prints the request's spans as a tree — the gateway's server span
// over the Redis script and the produce, the worker's process span under
// the produce, Postgres and the journal ack under the worker — each with a
// duration.
func testLocatePrintsSpanTree(t *testing.T, e engine) {
	dir := mustSpanStore(t)
	p := mustPipeline(t, e, both, func(c *config) { c.Telemetry.TraceStoreDir = dir; c.Worker.RedriveAfter = time.Hour })
	p.mustSale(t, 6, 1, map[int64]int64{60: 5})
	const rid = "tree-1"
	// Other orders beside it may share its worker batch, whose span links
	// every one of them: none of theirs is in its tree.
	for i, id := range []string{rid, "tree-2", "tree-3"} {
		p.mustAccept(t, orderBody{RequestID: id, UserID: int64(i + 1), ActivityID: 6, ItemID: 60, Quantity: 1})
	}
	testenv.WaitFor(t, 20*time.Second, "the orders UNPAID and their journal entries acked", func() bool {
		return mustLocate(t, p, rid).Status == "UNPAID" && mustLocate(t, p, "tree-3").Status == "UNPAID" &&
			p.journalLen(t, stockItem(6, 60)) == 0
	})
	spans, err := telemetry.ReadTrace(dir, mustLocate(t, p, rid).TraceID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range spans {
		if id := s.Attrs["order.request_id"]; id != "" && id != rid {
			t.Errorf("the trace of %s holds span %q of request %s", rid, s.Name, id)
		}
	}
	var out bytes.Buffer
	if err := runLocate(context.Background(), p.Cfg, []string{rid}, &out); err != nil {
		t.Fatalf("locate: %v", err)
	}
	text := out.String()
	_, tree, ok := strings.Cut(text, "spans ("+dir+"):\n")
	if !ok {
		t.Fatalf("locate printed no span tree:\n%s", text)
	}
	topic := p.Cfg.Kafka.Topic
	// In this order, each at its depth in the tree (the batch span and
	// what it does hang under the message's process span it links).
	want := []struct {
		name  string
		depth int
	}{
		{"POST /v1/orders", 0},
		{"redis evalsha", 1}, // the reserve script
		{"send " + topic, 1},
		{"process " + topic, 2},
		{"process " + topic + " batch", 3},
		{"BEGIN", 4},
		{"INSERT", 4},
		{"UPDATE", 4},
		{"COMMIT", 4},
		{"redis evalsha", 4}, // the journal ack, after the commit
	}
	lines := strings.Split(strings.TrimSpace(tree), "\n")
	next := 0
	for _, w := range want {
		found := false
		for ; next < len(lines) && !found; next++ {
			name, depth, dur := treeLine(lines[next])
			if name == w.name && depth == w.depth {
				found = true
				if _, err := time.ParseDuration(dur); err != nil {
					t.Errorf("%q has no duration: %v", lines[next], err)
				}
			}
		}
		if !found {
			t.Fatalf("span tree lacks %q at depth %d (in order):\n%s", w.name, w.depth, tree)
		}
	}
}

// testLocatePrintsSpanTreeFromJaeger: with TRACE_QUERY_URL set, `orderpipe
// locate` reads the request's trace from the Jaeger query API (GET
// /api/traces/{id}, here an HTTP server answering with the documents Jaeger
// v2 gives for one order, pkg/telemetry/testdata), then the batch trace its
// process span links, and prints the same tree as from the local store —
// ahead of TRACE_STORE_DIR, also set. An unreachable Jaeger is one line of
// the output ("trace store unreachable: …"); the rest and the exit status
// stand.
func testLocatePrintsSpanTreeFromJaeger(t *testing.T, e engine) {
	const (
		requestTrace = "0af7651916cd43dd8448eb211c80319c" // the documents' traces
		batchTrace   = "00c4a9e6f1d2b3a45e6f708192a3b4c5"
		rid          = "jaeger-1"
	)
	docs := map[string][]byte{}
	for id, name := range map[string]string{requestTrace: "jaeger-trace-request.json", batchTrace: "jaeger-trace-batch.json"} {
		b, err := os.ReadFile("pkg/telemetry/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		docs[id] = b
	}
	var mu sync.Mutex
	var asked []string
	jaeger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := strings.CutPrefix(r.URL.Path, "/api/traces/")
		mu.Lock()
		asked = append(asked, id)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if doc, ok := docs[id]; ok && r.Method == http.MethodGet {
			_, _ = w.Write(doc)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"data":null,"total":0,"limit":0,"offset":0,"errors":[{"code":404,"msg":"trace not found"}]}`))
	}))
	defer jaeger.Close()

	mustRecordSpans(t)
	p := mustPipeline(t, e, both, func(c *config) { c.Worker.RedriveAfter = time.Hour })
	p.mustSale(t, 7, 1, map[int64]int64{70: 5})
	// The caller's traceparent puts the request in the documents' trace.
	r := p.do(t, http.MethodPost, "/v1/orders", "application/json",
		orderBody{RequestID: rid, UserID: 1, ActivityID: 7, ItemID: 70, Quantity: 1},
		"traceparent", "00-"+requestTrace+"-b7ad6b7169203331-01")
	if r.Status != http.StatusAccepted {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	testenv.WaitFor(t, 20*time.Second, "the order UNPAID", func() bool { return mustLocate(t, p, rid).Status == "UNPAID" })

	cfg := p.Cfg
	cfg.Telemetry.TraceStoreDir = t.TempDir() // empty: TRACE_QUERY_URL wins
	cfg.TraceQueryURL = jaeger.URL
	var out bytes.Buffer
	if err := runLocate(context.Background(), cfg, []string{rid}, &out); err != nil {
		t.Fatalf("locate: %v", err)
	}
	text := out.String()
	_, tree, ok := strings.Cut(text, "spans ("+jaeger.URL+"):\n")
	if !ok || strings.Contains(text, cfg.Telemetry.TraceStoreDir) {
		t.Fatalf("locate printed no span tree from Jaeger:\n%s", text)
	}
	want := []struct {
		name    string
		depth   int
		service string
	}{
		{"POST /v1/orders", 0, "orderpipe-gateway server"},
		{"redis evalsha", 1, "orderpipe-gateway client"},
		{"send orders.requested", 1, "orderpipe-gateway producer"},
		{"process orders.requested", 2, "orderpipe-worker consumer"},
		{"process orders.requested batch", 3, "orderpipe-worker consumer"},
		{"redis evalsha", 4, "orderpipe-worker client"}, // the claim
		{"BEGIN", 4, "orderpipe-worker client"},
		{"INSERT", 4, "orderpipe-worker client"},
		{"UPDATE", 4, "orderpipe-worker client"},
		{"COMMIT", 4, "orderpipe-worker client"},
		{"redis evalsha", 4, "orderpipe-worker client"}, // the ack
	}
	lines := strings.Split(strings.TrimSpace(tree), "\n")
	if len(lines) != len(want) {
		t.Errorf("span tree has %d lines, want %d:\n%s", len(lines), len(want), tree)
	}
	for i, w := range want {
		if i >= len(lines) {
			break
		}
		name, depth, dur := treeLine(lines[i])
		if name != w.name || depth != w.depth || !strings.Contains(lines[i], "["+w.service+"]") {
			t.Errorf("line %d: %q, want %q at depth %d [%s]", i, lines[i], w.name, w.depth, w.service)
		}
		if _, err := time.ParseDuration(dur); err != nil {
			t.Errorf("%q has no duration: %v", lines[i], err)
		}
	}
	mu.Lock()
	if want := []string{requestTrace, batchTrace}; !slices.Equal(asked, want) {
		t.Errorf("Jaeger was asked for %v, want %v (the request's trace, then the linked batch trace)", asked, want)
	}
	mu.Unlock()

	// Jaeger unreachable: the report, its exit status, and one line saying so.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	cfg.TraceQueryURL = gone.URL
	out.Reset()
	if err := runLocate(context.Background(), cfg, []string{rid}, &out); err != nil {
		t.Fatalf("locate with Jaeger unreachable: %v", err)
	}
	text = out.String()
	if !strings.Contains(text, "\nspans: trace store unreachable: ") || !strings.Contains(text, "UNPAID") ||
		!strings.Contains(text, "trace         "+requestTrace) {
		t.Errorf("locate with Jaeger unreachable:\n%s", text)
	}
	out.Reset()
	if err := runLocate(context.Background(), cfg, []string{rid, "--json"}, &out); err != nil {
		t.Fatalf("locate --json with Jaeger unreachable: %v", err)
	}
	var rep struct {
		Status, TraceID, SpansError string
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Status != "UNPAID" || rep.TraceID != requestTrace || !strings.HasPrefix(rep.SpansError, "trace store unreachable: ") {
		t.Errorf("locate --json with Jaeger unreachable: %s", out.Bytes())
	}
}

// treeLine splits a line of the span tree into the span's name, its depth
// (columns of three runes: "├─ ", "└─ ", "│  ", "   ") and its duration.
func treeLine(line string) (name string, depth int, dur string) {
	rest := []rune(line)
	for len(rest) >= 3 {
		col := string(rest[:3])
		if col != "├─ " && col != "└─ " && col != "│  " && col != "   " {
			break
		}
		rest, depth = rest[3:], depth+1
	}
	fields := strings.Split(string(rest), "  ")
	if len(fields) < 2 {
		return "", depth, ""
	}
	return fields[0], depth, fields[1]
}

func stockItem(a, i int64) stock.Item { return stock.Item{ActivityID: a, ItemID: i} }

// testLocateRefusedAndRedisDown: a request the gateway refused leaves no
// record, but its server span carries the requestId: with the span store
// on, `orderpipe locate` says REFUSED with the answer's status and its
// trace (exit 0). With Redis unreachable, locate still shows what Postgres
// knows (an UNPAID order, exit 0, the Redis part named as unread), and a
// request Postgres does not know is "could not run" (exit 2), not UNKNOWN:
// its reservation could be in Redis.
func testLocateRefusedAndRedisDown(t *testing.T, e engine) {
	dir := mustSpanStore(t)
	p := mustPipeline(t, e, both, func(c *config) { c.Telemetry.TraceStoreDir = dir; c.Worker.RedriveAfter = time.Hour })
	p.mustSale(t, 8, 1, map[int64]int64{80: 1})
	if r := p.order(t, orderBody{RequestID: "ref-ok", UserID: 1, ActivityID: 8, ItemID: 80, Quantity: 1}); r.Status != http.StatusAccepted {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	if r := p.order(t, orderBody{RequestID: "ref-sold-out", UserID: 2, ActivityID: 8, ItemID: 80, Quantity: 1}); r.Status != http.StatusConflict {
		t.Fatalf("order past the stock: %d %v, want 409", r.Status, r.Body)
	}
	rep := mustLocate(t, p, "ref-sold-out")
	if rep.Status != locate.StatusRefused || rep.GatewayAnswered != "409" || len(rep.TraceID) != 32 || !strings.Contains(rep.Where, "HTTP 409") {
		t.Errorf("refused request: %+v", rep)
	}
	if spans, err := telemetry.ReadTrace(dir, rep.TraceID); err != nil || len(spans) == 0 {
		t.Errorf("the refused request's trace %s: %d spans, %v", rep.TraceID, len(spans), err)
	}
	testenv.WaitFor(t, 20*time.Second, "ref-ok UNPAID", func() bool { return mustLocate(t, p, "ref-ok").Status == "UNPAID" })

	cfg := p.Cfg
	cfg.Redis.Addr = freeAddr(t) // nothing listens there
	var out bytes.Buffer
	if err := runLocate(context.Background(), cfg, []string{"ref-ok", "--json"}, &out); err != nil {
		t.Fatalf("locate with Redis down, an order Postgres has: %v\n%s", err, out.String())
	}
	var down locate.Report
	if err := json.Unmarshal(out.Bytes(), &down); err != nil || down.Status != "UNPAID" || down.RedisError == "" ||
		!strings.Contains(down.Where, "Redis could not be read") {
		t.Errorf("locate with Redis down: %+v (%v)", down, err)
	}
	out.Reset()
	var code setting.ExitCode
	if err := runLocate(context.Background(), cfg, []string{"ref-nowhere"}, &out); !errors.As(err, &code) || code != 2 {
		t.Errorf("locate with Redis down, a request Postgres does not know: %v, want exit 2\n%s", err, out.String())
	}
}
