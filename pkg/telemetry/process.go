package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"time"
)

// StartTracing sets tracing up for a long-running process (SetupTracing),
// says where spans go, and returns what flushes them at the end (within 5 s,
// even after ctx ended).
func StartTracing(ctx context.Context, log *slog.Logger, service string) (stop func(), err error) {
	shutdown, err := SetupTracing(ctx, service)
	if err != nil {
		return nil, err
	}
	if TracingOn() {
		log.Info("tracing on", "endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")+os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
			"sampler", os.Getenv("OTEL_TRACES_SAMPLER"), "sampler_arg", os.Getenv("OTEL_TRACES_SAMPLER_ARG"),
			"trace_store", os.Getenv(TraceStoreEnv))
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}, nil
}

// ServeMetrics serves m's /metrics and a /healthz on addr (METRICS_ADDR: a
// process without the gateway, whose own port serves them) until ctx ends.
func ServeMetrics(ctx context.Context, addr string, m *Metrics) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, `{"status":"ok"}`) })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving metrics on %s: %w", addr, err)
	}
	return nil
}

// ServePprof serves Go's runtime profiles (PPROF_ADDR) on their own
// listener, so they are never reachable through the public API port. The
// block and mutex profiles sample while it serves (one blocking event per
// 10 µs blocked, one contention in 100), so /debug/pprof/block and /mutex
// (?seconds=N for the last N seconds) say where goroutines wait.
func ServePprof(ctx context.Context, addr string) error {
	runtime.SetBlockProfileRate(int((10 * time.Microsecond).Nanoseconds()))
	runtime.SetMutexProfileFraction(100)
	defer runtime.SetBlockProfileRate(0)
	defer runtime.SetMutexProfileFraction(0)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving pprof on %s: %w", addr, err)
	}
	return nil
}
