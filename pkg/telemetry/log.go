package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// TraceHandler adds the trace of the context to every record logged with a
// *Context method: trace_id and span_id of its span, and request_id (and
// order_no) of the order marked by WithOrder unless the call names them.
type TraceHandler struct{ next slog.Handler }

// NewTraceHandler wraps next.
func NewTraceHandler(next slog.Handler) *TraceHandler { return &TraceHandler{next: next} }

func (h *TraceHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *TraceHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx == nil {
		return h.next.Handle(ctx, r)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	if rid, ono := OrderFrom(ctx); rid != "" {
		hasRID, hasONo := false, false
		r.Attrs(func(a slog.Attr) bool {
			hasRID = hasRID || a.Key == "request_id"
			hasONo = hasONo || a.Key == "order_no"
			return true
		})
		if !hasRID {
			r.AddAttrs(slog.String("request_id", rid))
		}
		if !hasONo && ono != "" {
			r.AddAttrs(slog.String("order_no", ono))
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *TraceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &TraceHandler{next: h.next.WithAttrs(as)}
}

func (h *TraceHandler) WithGroup(name string) slog.Handler {
	return &TraceHandler{next: h.next.WithGroup(name)}
}
