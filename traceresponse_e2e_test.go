package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

// testTraceResponseAndStatusEventTrace: a sampled request's answer carries
// the W3C traceresponse header naming its server span, an unsampled one
// none; the order's orders.status event continues the order's trace (its
// send span is a child of the worker's process span) and the relay's span
// links to it.
func testTraceResponseAndStatusEventTrace(t *testing.T, e engine) {
	rec := mustRecordSpans(t)
	p := mustPipeline(t, e, components{"gateway", "worker", "relay"}, nil)
	p.mustSale(t, 11, 1, map[int64]int64{110: 5})
	r := p.mustAccept(t, orderBody{RequestID: "tr-1", UserID: 1, ActivityID: 11, ItemID: 110, Quantity: 1})
	server := rec.waitOne(t, "the gateway's server span", named("POST /v1/orders", trace.SpanKindServer, "tr-1"))
	sc := server.SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; r.Header.Get("Traceresponse") != want {
		t.Errorf("traceresponse %q, want %q", r.Header.Get("Traceresponse"), want)
	}
	unsampled := p.do(t, http.MethodPost, "/v1/orders", "application/json",
		orderBody{RequestID: "tr-2", UserID: 2, ActivityID: 11, ItemID: 110, Quantity: 1},
		"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	if unsampled.Status != http.StatusAccepted || unsampled.Header.Get("Traceresponse") != "" {
		t.Errorf("unsampled request: %d, traceresponse %q, want none", unsampled.Status, unsampled.Header.Get("Traceresponse"))
	}

	process := rec.waitOne(t, "the worker's process span", named("process "+p.Cfg.Kafka.Topic, trace.SpanKindConsumer, "tr-1"))
	send := rec.waitOne(t, "the relay's send span", named("send "+p.Cfg.Kafka.StatusTopic, trace.SpanKindProducer, "tr-1"))
	if send.SpanContext().TraceID() != sc.TraceID() || send.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Errorf("the status event's send span (parent %s) is not a child of the worker's process span %s",
			send.Parent().SpanID(), process.SpanContext().SpanID())
	}
	if attr(send, telemetry.AttrOrderNo) != r.Str("orderNo") || attr(send, "order.status") != "UNPAID" {
		t.Errorf("send span attributes %v", send.Attributes())
	}
	var relaySpans []sdktrace.ReadOnlySpan
	testenv.WaitFor(t, 20*time.Second, "the relay's span linking the order's trace", func() bool {
		relaySpans = rec.where(func(sp sdktrace.ReadOnlySpan) bool {
			return sp.Name() == "relay "+p.Cfg.Kafka.StatusTopic && hasLink(sp, process.SpanContext())
		})
		return len(relaySpans) > 0
	})
	evs, err := p.Orders.EventsOf(context.Background(), r.Str("orderNo"))
	if err != nil || len(evs) != 1 {
		t.Fatalf("events: %v %v", evs, err)
	}
	if want := telemetry.TraceParent(trace.ContextWithSpanContext(context.Background(), process.SpanContext())); evs[0].TraceParent != want {
		t.Errorf("the event row keeps trace %q, want the process span's %q", evs[0].TraceParent, want)
	}
}
