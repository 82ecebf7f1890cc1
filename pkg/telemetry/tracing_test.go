package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/testenv"
)

// mustRecorder installs a recording provider globally until cleanup.
func mustRecorder(t *testing.T) (*tracetest.SpanRecorder, trace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

func TestExportWanted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    bool
		wantErr bool
	}{
		{"NothingSet", nil, false, false},
		{"Endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, true, false},
		{"TracesEndpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true, false},
		{"ExporterOTLP", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, false},
		{"ExporterNone", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, false, false},
		{"SDKDisabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, false, false},
		{"SampledOff", map[string]string{"OTEL_TRACES_SAMPLER": "always_off", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, false, false},
		{"Unsupported", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
				t.Setenv(k, tc.env[k])
			}
			got, err := exportWanted()
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("exportWanted() = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestSetupTracingOffLeavesNoopProvider(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	before := otel.GetTracerProvider()
	shutdown, err := SetupTracing(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != before {
		t.Errorf("tracing off replaced the provider")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	// The propagator is set all the same, so headers pass through.
	if f := otel.GetTextMapPropagator().Fields(); !strings.Contains(strings.Join(f, ","), "traceparent") {
		t.Errorf("propagator fields %v", f)
	}
}

func TestSetupTracingExports(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // nothing listens: export fails, never blocks
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	shutdown, err := SetupTracing(context.Background(), "default-name")
	if err != nil {
		t.Fatal(err)
	}
	tp, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	if !ok {
		t.Fatalf("provider %T", otel.GetTracerProvider())
	}
	_, span := tp.Tracer("t").Start(context.Background(), "s")
	if !span.IsRecording() {
		t.Errorf("span does not record")
	}
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	_ = shutdown(ctx) // the export fails; what matters is that it returns

	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := SetupTracing(context.Background(), "x"); err == nil {
		t.Errorf("unsupported protocol accepted")
	}
}

func TestOrderAttributesOnEverySpan(t *testing.T) {
	rec, _ := mustRecorder(t)
	ctx := WithOrder(context.Background(), "r-1", "1-2-abc")
	ctx, parent := Tracer().Start(ctx, "parent")
	_, child := Tracer().Start(ctx, "child")
	child.End()
	parent.End()
	for _, sp := range rec.Ended() {
		got := map[attribute.Key]string{}
		for _, kv := range sp.Attributes() {
			got[kv.Key] = kv.Value.Emit()
		}
		if got[AttrRequestID] != "r-1" || got[AttrOrderNo] != "1-2-abc" {
			t.Errorf("%s: attributes %v", sp.Name(), got)
		}
	}
}

func TestTraceHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewTraceHandler(slog.NewJSONHandler(&buf, nil))).With("component", "c")
	_, tp := mustRecorder(t)
	ctx, span := tp.Tracer("t").Start(WithOrder(context.Background(), "r-9", "o-9"), "s")
	defer span.End()

	read := func() map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%v: %s", err, buf.Bytes())
		}
		buf.Reset()
		return m
	}
	log.InfoContext(ctx, "hello")
	m := read()
	if m["trace_id"] != span.SpanContext().TraceID().String() || m["span_id"] != span.SpanContext().SpanID().String() ||
		m["request_id"] != "r-9" || m["order_no"] != "o-9" || m["component"] != "c" {
		t.Errorf("line %v", m)
	}
	// A request_id the call names wins (no duplicate key).
	log.InfoContext(ctx, "explicit", "request_id", "other")
	if line := buf.String(); strings.Count(line, `"request_id"`) != 1 || !strings.Contains(line, `"request_id":"other"`) {
		t.Errorf("line %s", line)
	}
	buf.Reset()
	log.Info("no context")
	if m := read(); m["trace_id"] != nil || m["request_id"] != nil {
		t.Errorf("line %v", m)
	}
}

func TestRedisSpansOnlyUnderRecordingParent(t *testing.T) {
	rec, _ := mustRecorder(t)
	r := testenv.MustRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	defer rdb.Close()
	InstrumentRedis(rdb)
	ctx := context.Background()
	key := r.Prefix + "k"

	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil { // no parent: no span
		t.Fatal(err)
	}
	ctx, parent := Tracer().Start(WithOrder(ctx, "r-1", ""), "parent")
	rdb.Get(ctx, key)
	rdb.Do(ctx, "NOSUCHCOMMAND") // an error
	rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, key); p.Get(ctx, key); return nil })
	parent.End()

	var got []string
	for _, sp := range rec.Ended() {
		if sp.Name() == "parent" {
			continue
		}
		got = append(got, sp.Name())
		if sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the parent", sp.Name())
		}
		var rid string
		for _, kv := range sp.Attributes() {
			if kv.Key == AttrRequestID {
				rid = kv.Value.AsString()
			}
		}
		if rid != "r-1" || sp.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s: kind %v, attributes %v", sp.Name(), sp.SpanKind(), sp.Attributes())
		}
		if (sp.Status().Code == codes.Error) != strings.Contains(sp.Name(), "nosuchcommand") {
			t.Errorf("%s: status %v", sp.Name(), sp.Status())
		}
	}
	if strings.Join(got, ",") != "redis get,redis nosuchcommand,redis pipeline" {
		t.Errorf("spans %v", got)
	}
}

func TestTraceParentRoundTrip(t *testing.T) {
	_, tp := mustRecorder(t)
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	s := TraceParent(ctx)
	sc, ok := ParseTraceParent(s)
	if !ok || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() || !sc.IsSampled() {
		t.Errorf("%q parsed as %v %v", s, sc, ok)
	}
	if TraceParent(context.Background()) != "" {
		t.Errorf("traceparent without a span")
	}
	if _, ok := ParseTraceParent("garbage"); ok {
		t.Errorf("garbage parsed")
	}
}

// TestRedisLogIsBounded: go-redis's own lines (a pool retrying its dials)
// reach the log at most redisLogsPerSecond at once, and the next line
// written counts the ones left out.
func TestRedisLogIsBounded(t *testing.T) {
	var buf bytes.Buffer
	l := newRedisLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	for i := range 50 {
		l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts", i)
	}
	if n := strings.Count(buf.String(), `"msg":"redis client"`); n != redisLogsPerSecond {
		t.Fatalf("50 lines at once logged %d, want %d:\n%s", n, redisLogsPerSecond, &buf)
	}
	time.Sleep(time.Second / redisLogsPerSecond) // the limiter refills
	l.Printf(context.Background(), "again")
	if !strings.Contains(buf.String(), `"lines_left_out_before":49`) {
		t.Errorf("the next line does not count the 49 left out:\n%s", &buf)
	}
}
