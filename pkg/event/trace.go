package event

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/telemetry"
)

// Messaging spans follow the OpenTelemetry messaging semantic conventions:
// "send <topic>" (producer) and "process <topic>" (consumer), with the trace
// context of the send span carried in the message's W3C headers so the
// consumer's process span continues the producer's trace.

// StartSend starts the producer span of msg, a child of ctx's span, and
// injects the span's context into msg's headers (replacing any there).
// Attributes are built only when the span records.
func StartSend(ctx context.Context, topic string, msg *kafka.Message) (context.Context, trace.Span) {
	if !telemetry.TracingOn() && !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx) // nothing to record, nothing to carry
	}
	ctx, span := telemetry.Tracer().Start(ctx, "send "+topic, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingSystemKafka, semconv.MessagingDestinationName(topic),
			semconv.MessagingOperationName("send"), semconv.MessagingOperationTypeSend,
			semconv.MessagingKafkaMessageKey(string(msg.Key)), semconv.MessagingMessageBodySize(len(msg.Value)))
		if rid := Header(*msg, HeaderRequestID); rid != "" {
			span.SetAttributes(telemetry.AttrRequestID.String(rid))
		}
	}
	Inject(ctx, msg)
	if span.IsRecording() {
		sent.add(span)
	}
	return ctx, span
}

// EndSend ends a send span with the outcome of the write.
func EndSend(span trace.Span, err error) {
	if span.IsRecording() {
		sent.remove(span.SpanContext().SpanID())
	}
	telemetry.RecordError(span, err)
	span.End()
}

// sent are the recording send spans whose message is being written, by span
// id; a writer's completion (kafka-go reports partition and offset only
// there, before WriteMessages returns) finds them by the traceparent header.
var sent = &sendSpans{spans: map[trace.SpanID]trace.Span{}}

type sendSpans struct {
	n     atomic.Int64
	mu    sync.Mutex
	spans map[trace.SpanID]trace.Span
}

func (s *sendSpans) add(span trace.Span) {
	s.mu.Lock()
	s.spans[span.SpanContext().SpanID()] = span
	s.n.Store(int64(len(s.spans)))
	s.mu.Unlock()
}

func (s *sendSpans) remove(id trace.SpanID) {
	s.mu.Lock()
	delete(s.spans, id)
	s.n.Store(int64(len(s.spans)))
	s.mu.Unlock()
}

func (s *sendSpans) complete(msgs []kafka.Message, err error) {
	if s.n.Load() == 0 || err != nil {
		return
	}
	for _, m := range msgs {
		sc, ok := telemetry.ParseTraceParent(Header(m, "traceparent"))
		if !ok {
			continue
		}
		s.mu.Lock()
		span := s.spans[sc.SpanID()]
		s.mu.Unlock()
		if span != nil {
			span.SetAttributes(semconv.MessagingDestinationPartitionID(strconv.Itoa(m.Partition)),
				semconv.MessagingKafkaOffset(int(m.Offset)))
		}
	}
}

// StartProcess starts the consumer span of one message: its parent is the
// context in the message's headers (ctx's span when it has none), and it
// links to the spans in links (the batch). The returned context is marked
// with the message's request id (telemetry.WithOrder).
func StartProcess(ctx context.Context, topic, group string, msg kafka.Message, links ...trace.Link) (context.Context, trace.Span) {
	ctx = Extract(ctx, msg)
	rid := Header(msg, HeaderRequestID)
	if rid != "" {
		ctx = telemetry.WithOrder(ctx, rid, "")
	}
	ctx, span := telemetry.Tracer().Start(ctx, "process "+topic, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...))
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingSystemKafka, semconv.MessagingDestinationName(topic),
			semconv.MessagingOperationName("process"), semconv.MessagingOperationTypeProcess,
			semconv.MessagingConsumerGroupName(group),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(msg.Partition)),
			semconv.MessagingKafkaOffset(int(msg.Offset)),
			semconv.MessagingKafkaMessageKey(string(msg.Key)), semconv.MessagingMessageBodySize(len(msg.Value)))
		if rid != "" {
			span.SetAttributes(telemetry.AttrRequestID.String(rid))
		}
	}
	return ctx, span
}

// StartBatch starts the span of processing a batch of n messages as one
// unit (one Postgres transaction); it is the parent of the batch's database
// and Redis work, and links to each message's context (AddLink).
func StartBatch(ctx context.Context, topic, group string, n int) (context.Context, trace.Span) {
	ctx, span := telemetry.Tracer().Start(ctx, "process "+topic+" batch", trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingSystemKafka, semconv.MessagingDestinationName(topic),
			semconv.MessagingOperationName("process"), semconv.MessagingOperationTypeProcess,
			semconv.MessagingConsumerGroupName(group), semconv.MessagingBatchMessageCount(n))
	}
	return ctx, span
}
