package telemetry

import "orderpipe/pkg/setting"

// Settings are the environment variables of the process's observability
// (OTEL_* are the OpenTelemetry SDK's own, not declared here).
var Settings = []setting.Var{
	{Name: "METRICS_ADDR", Default: ":9090", Help: "/metrics listener of a process without the gateway"},
	{Name: "PPROF_ADDR", Default: "", Help: "serve Go's net/http/pprof profiles on this address (keep it private; the block and mutex profiles sample while it is set); empty ⇒ off"},
	{Name: "TRACE_STORE_DIR", Default: "", Help: "append every span to JSON-lines files in this directory, for `orderpipe locate` (local runs); empty ⇒ off"},
	// Read before the configuration (the logger exists first).
	{Name: "LOG_LEVEL", Default: "info", Help: "debug for more (any other value means info)"},
}

// Config is the process's observability listeners and span store.
type Config struct {
	MetricsAddr   string // METRICS_ADDR
	PprofAddr     string // PPROF_ADDR; empty ⇒ off
	TraceStoreDir string // TRACE_STORE_DIR
}

// Read is the Config the settings describe.
func Read(r *setting.Reader) Config {
	return Config{MetricsAddr: r.Addr("METRICS_ADDR", false), PprofAddr: r.Addr("PPROF_ADDR", true), TraceStoreDir: r.String("TRACE_STORE_DIR")}
}
