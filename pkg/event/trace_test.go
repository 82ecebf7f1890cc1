package event

import (
	"context"
	"testing"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"orderpipe/pkg/telemetry"
)

func TestSendAndProcessSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := telemetry.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	telemetry.SetPropagator()
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })

	ctx, parent := tp.Tracer("t").Start(context.Background(), "request")
	msg := NewMessage(OrderRequested{RequestID: "r-1", OrderNo: "1-2-x", UserID: 1, ActivityID: 1, ItemID: 2, Quantity: 1})
	_, send := StartSend(ctx, "orders.requested", &msg)
	send.End()
	parent.End()
	if Header(msg, "traceparent") == "" {
		t.Fatalf("no traceparent in %v", msg.Headers)
	}
	msg.Partition, msg.Offset = 3, 42
	bctx, batch := StartBatch(context.Background(), "orders.requested", "g", 1)
	pctx, process := StartProcess(bctx, "orders.requested", "g", msg, trace.LinkFromContext(bctx))
	process.End()
	batch.End()

	if process.SpanContext().TraceID() != send.SpanContext().TraceID() {
		t.Errorf("process span not in the send span's trace")
	}
	if rid, _ := telemetry.OrderFrom(pctx); rid != "r-1" {
		t.Errorf("process context is about %q", rid)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
	}
	p := byName["process orders.requested"]
	if p == nil || p.Parent().SpanID() != send.SpanContext().SpanID() || p.SpanKind() != trace.SpanKindConsumer ||
		len(p.Links()) != 1 || p.Links()[0].SpanContext.SpanID() != batch.SpanContext().SpanID() {
		t.Fatalf("process span %+v", p)
	}
	want := map[string]string{"messaging.system": "kafka", "messaging.destination.name": "orders.requested",
		"messaging.destination.partition.id": "3", "messaging.kafka.offset": "42", "messaging.kafka.message.key": "1:2",
		"messaging.operation.type": "process", "order.request_id": "r-1", "messaging.consumer.group.name": "g"}
	for _, kv := range p.Attributes() {
		if w, ok := want[string(kv.Key)]; ok && kv.Value.Emit() != w {
			t.Errorf("%s = %s, want %s", kv.Key, kv.Value.Emit(), w)
		}
		delete(want, string(kv.Key))
	}
	if len(want) > 0 {
		t.Errorf("process span lacks %v", want)
	}
	if s := byName["send orders.requested"]; s == nil || s.SpanKind() != trace.SpanKindProducer || s.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("send span %+v", s)
	}
}

// With tracing off, a caller's context still passes through to the message.
func TestSendPassesContextThroughWhenOff(t *testing.T) {
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(noop.NewTracerProvider())
	telemetry.SetPropagator()
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })
	sc, _ := telemetry.ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
	msg := kafka.Message{}
	_, span := StartSend(ctx, "t", &msg)
	span.End()
	if got := Header(msg, "traceparent"); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("traceparent %q", got)
	}
}
