package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// mustSpanStore installs, as the global tracer provider (always sampling),
// the local span store's exporter writing to a fresh directory, as
// TRACE_STORE_DIR makes SetupTracing do; restored at cleanup. Synchronous
// export: a span is in the file once it has ended.
func mustSpanStore(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	exp, err := telemetry.NewFileExporter(dir, "orderpipe-all")
	if err != nil {
		tb.Fatal(err)
	}
	tp := telemetry.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("orderpipe-all"))))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	telemetry.SetPropagator()
	tb.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	return dir
}

// TestLocatePrintsSpanTree: with the local span store on, `orderpipe
// locate` prints the request's spans as a tree — the gateway's server span
// over the Redis script and the produce, the worker's process span under
// the produce, Postgres and the journal ack under the worker — each with a
// duration.
func TestLocatePrintsSpanTree(t *testing.T) {
	dir := mustSpanStore(t)
	p := mustPipeline(t, both, func(c *config) { c.TraceStoreDir = dir; c.RedriveAfter = time.Hour })
	p.mustSale(t, 6, 1, map[int64]int64{60: 5})
	const rid = "tree-1"
	r := p.order(t, orderBody{RequestID: rid, UserID: 1, ActivityID: 6, ItemID: 60, Quantity: 1})
	if r.Status != http.StatusAccepted {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	testenv.WaitFor(t, 20*time.Second, "the order UNPAID and its journal entry acked", func() bool {
		return mustLocate(t, p, rid).Status == "UNPAID" && p.journalLen(t, stockItem(6, 60)) == 0
	})
	var out bytes.Buffer
	if err := runLocate(context.Background(), p.Cfg, []string{rid}, &out); err != nil {
		t.Fatalf("locate: %v", err)
	}
	text := out.String()
	_, tree, ok := strings.Cut(text, "spans ("+dir+"):\n")
	if !ok {
		t.Fatalf("locate printed no span tree:\n%s", text)
	}
	topic := p.Cfg.KafkaTopic
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
