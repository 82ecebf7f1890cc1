package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes every span about one order carries.
const (
	AttrRequestID = attribute.Key("order.request_id")
	AttrOrderNo   = attribute.Key("order.no")
	AttrOutcome   = attribute.Key("order.outcome")
	// AttrFromVerdict marks a refusal answered from the item's verdict: no reserve script ran.
	AttrFromVerdict = attribute.Key("order.from_verdict")
	AttrReason      = attribute.Key("order.reason")
)

// InstrumentationName names the tracer of orderpipe's own spans.
const InstrumentationName = "orderpipe"

// Tracer is orderpipe's tracer on the global provider; a provider installed
// later (a test's) is picked up, without a lookup under a lock per span.
func Tracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if c := cachedTracer.Load(); c != nil && c.tp == tp {
		return c.tracer
	}
	c := &providerTracer{tp: tp, tracer: tp.Tracer(InstrumentationName)}
	cachedTracer.Store(c)
	return c.tracer
}

type providerTracer struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
}

var cachedTracer atomic.Pointer[providerTracer]

// TracingOn reports whether spans can be recorded: an SDK provider is
// installed (SetupTracing with an exporter, or a test's). When it is off,
// the hot path skips the tracing machinery and only passes a caller's
// context along.
func TracingOn() bool {
	_, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	return ok
}

// SetPropagator installs the W3C trace context and baggage propagator
// globally: incoming traceparent headers are continued and Kafka headers
// carry the context even while this process exports nothing.
func SetPropagator() {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
}

// SetupTracing configures OpenTelemetry tracing from the standard OTEL_*
// environment variables and installs it globally. Spans are exported over
// OTLP (OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL grpc, or http/protobuf by
// default) by a batch span processor, which drops rather than blocks when
// its queue is full. Tracing is off (a no-op provider; headers are still
// propagated) unless an OTLP endpoint is set or OTEL_TRACES_EXPORTER=otlp;
// OTEL_TRACES_EXPORTER=none, OTEL_SDK_DISABLED=true or
// OTEL_TRACES_SAMPLER=always_off turn it off (nothing would ever be
// recorded, so the SDK is not installed and costs nothing).
// TRACE_STORE_DIR, when set, also turns tracing on: spans are appended to
// the local span store there (see FileExporter), with or without OTLP.
// serviceName is the default of OTEL_SERVICE_NAME. The returned shutdown
// flushes buffered spans.
func SetupTracing(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	SetPropagator()
	noop := func(context.Context) error { return nil }
	on, err := exportWanted()
	if err != nil {
		return noop, err
	}
	storeDir := strings.TrimSpace(os.Getenv(TraceStoreEnv))
	if !on && (storeDir == "" || tracingDisabled()) {
		return noop, nil
	}
	var procs []sdktrace.TracerProviderOption
	if on {
		exp, err := newExporter(ctx)
		if err != nil {
			return noop, err
		}
		procs = append(procs, sdktrace.WithBatcher(exp))
	}
	if storeDir != "" {
		// The local span store (TRACE_STORE_DIR), next to OTLP or alone.
		fexp, err := NewFileExporter(storeDir, serviceName)
		if err != nil {
			return noop, err
		}
		procs = append(procs, sdktrace.WithBatcher(fexp, sdktrace.WithBatchTimeout(time.Second)))
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the default service name.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return noop, fmt.Errorf("building the tracing resource: %w", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (default: parent-based,
	// always on), read by the SDK.
	tp := NewTracerProvider(append(procs, sdktrace.WithResource(res))...)
	otel.SetTracerProvider(tp)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		slog.Warn("opentelemetry", "err", err)
	}))
	return tp.Shutdown, nil
}

// NewTracerProvider is an SDK provider with orderpipe's span processor
// (which copies the order attributes of the context onto every span) in
// front of opts' processors. Tests build theirs with it too.
func NewTracerProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	opts = append([]sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(orderProcessor{})}, opts...)
	return sdktrace.NewTracerProvider(opts...)
}

// tracingDisabled: the SDK is turned off, or nothing would ever be sampled,
// or OTEL_TRACES_EXPORTER=none.
func tracingDisabled() bool {
	return strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")) == "always_off" ||
		strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")) == "none"
}

// exportWanted reads whether traces are to be exported over OTLP.
func exportWanted() (bool, error) {
	if tracingDisabled() {
		return false, nil
	}
	exporters := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if exporters == "" {
		return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	}
	on := false
	for _, e := range strings.Split(exporters, ",") {
		switch strings.TrimSpace(e) {
		case "none":
			return false, nil
		case "otlp":
			on = true
		default:
			return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: orderpipe supports otlp and none", exporters)
		}
	}
	return on, nil
}

// newExporter builds the OTLP exporter of the configured protocol; the
// exporter itself reads the endpoint, headers, timeout and TLS variables.
func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch proto {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: orderpipe supports grpc and http/protobuf", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP trace exporter: %w", err)
	}
	return exp, nil
}

// orderKey carries the order a piece of work is about.
type orderKey struct{}

type orderRef struct{ requestID, orderNo string }

// WithOrder returns ctx marked as being about one order: every span started
// under it carries order.request_id (and order.no when known), and log lines
// written with it carry request_id (and order_no).
func WithOrder(ctx context.Context, requestID, orderNo string) context.Context {
	return context.WithValue(ctx, orderKey{}, orderRef{requestID: requestID, orderNo: orderNo})
}

// OrderFrom is the order of ctx ("" when none).
func OrderFrom(ctx context.Context) (requestID, orderNo string) {
	if ctx == nil {
		return "", ""
	}
	ref, _ := ctx.Value(orderKey{}).(orderRef)
	return ref.requestID, ref.orderNo
}

// OrderAttrs are the span attributes of one order.
func OrderAttrs(requestID, orderNo string) []attribute.KeyValue {
	if orderNo == "" {
		return []attribute.KeyValue{AttrRequestID.String(requestID)}
	}
	return []attribute.KeyValue{AttrRequestID.String(requestID), AttrOrderNo.String(orderNo)}
}

// orderProcessor copies the order of the parent context onto each span as
// it starts; the SDK calls it for recording spans only.
type orderProcessor struct{}

func (orderProcessor) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	if rid, ono := OrderFrom(parent); rid != "" {
		s.SetAttributes(OrderAttrs(rid, ono)...)
	}
}
func (orderProcessor) OnEnd(sdktrace.ReadOnlySpan)      {}
func (orderProcessor) Shutdown(context.Context) error   { return nil }
func (orderProcessor) ForceFlush(context.Context) error { return nil }

// RecordError marks span as failed with err (no-op for a nil error or a
// span that does not record).
func RecordError(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// TraceParent is the W3C traceparent of ctx's span ("" when it has none).
func TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// ParseTraceParent reads a W3C traceparent into a remote span context.
func ParseTraceParent(tp string) (trace.SpanContext, bool) {
	if tp == "" {
		return trace.SpanContext{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	sc := trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}
