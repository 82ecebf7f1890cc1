package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

type nopProducer struct{}

func (nopProducer) WriteMessages(context.Context, ...kafka.Message) error { return nil }

// tracingCase is one way tracing is set up for a benchmark: raw leaves the
// tracing middleware out.
type tracingCase struct {
	name string
	tp   trace.TracerProvider
	raw  bool
}

// tracingCases are the tracing set-ups both benchmarks compare, the
// tracer provider before them given back at the end of b.
func tracingCases(b *testing.B) []tracingCase {
	prev := otel.GetTracerProvider()
	b.Cleanup(func() { otel.SetTracerProvider(prev) })
	telemetry.SetPropagator()
	return []tracingCase{
		{"Untraced", noop.NewTracerProvider(), true},
		{"Off", noop.NewTracerProvider(), false},
		{"SDKNeverSample", telemetry.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())), false},
	}
}

// BenchmarkCreateOrderTracing measures POST /v1/orders through the whole
// handler (real Redis, a producer that returns at once): Untraced is the
// baseline without any tracing code in front; Off is tracing off (no
// exporter, or OTEL_TRACES_SAMPLER=always_off: SetupTracing installs no SDK),
// which the contract allows to cost a few percent at most; SDKNeverSample is
// tracing on for a request the sampler drops (ratio sampling); SampledOn
// records every span.
func BenchmarkCreateOrderTracing(b *testing.B) {
	r := testenv.MustRedis(b)
	st := stock.New(r.Client, r.Prefix)
	it := stock.Item{ActivityID: 1, ItemID: 1}
	if _, err := st.Preheat(context.Background(), stock.Sale{Item: it, Stock: 1 << 40, StartsAt: time.Now().Add(-time.Hour),
		EndsAt: time.Now().Add(time.Hour), Cap: 1}); err != nil {
		b.Fatal(err)
	}
	cases := append(tracingCases(b),
		tracingCase{"SampledOn", telemetry.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())), false})
	var seq atomic.Int64
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			otel.SetTracerProvider(c.tp)
			s := New(Config{}, Deps{Stock: st, Producer: nopProducer{}, Metrics: telemetry.NewMetrics()})
			h := s.Handler()
			if c.raw {
				h = s.mux
			}
			b.ReportAllocs()
			// Concurrent clients, so the CPU (not one Redis round trip) bounds
			// the throughput, as in a flash sale.
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := seq.Add(1)
					body := fmt.Sprintf(`{"requestId":"b%d","userId":%d,"activityId":1,"itemId":1,"quantity":1}`, i, i)
					req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusAccepted {
						b.Errorf("%d %s", w.Code, w.Body)
						return
					}
				}
			})
		})
	}
}

// BenchmarkTracingMiddleware isolates what the server-span middleware costs
// per request around a handler that does nothing, to set against the CPU a
// whole POST /v1/orders takes (BenchmarkCreateOrderTracing).
func BenchmarkTracingMiddleware(b *testing.B) {
	for _, c := range tracingCases(b) {
		b.Run(c.name, func(b *testing.B) {
			otel.SetTracerProvider(c.tp)
			mux := http.NewServeMux()
			mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
			var h http.Handler = mux
			if !c.raw {
				h = traced(mux)
			}
			req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{}`))
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
