package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"

	"orderpipe/pkg/setting"
	"orderpipe/reconciler"
	"orderpipe/reconciler/locate"
	"orderpipe/worker/dlq"
)

// env is the environment a subcommand's Main sees in the end-to-end tests:
// the settings the pipeline was given (cfg), the process's environment and
// the declared defaults for the rest.
func (c config) env() setting.Env {
	given := map[string]string{"DATABASE_URL": c.Database.URL, "REDIS_ADDR": c.Redis.Addr, "REDIS_URL": c.Redis.URL,
		"REDIS_USERNAME": c.Redis.Username, "REDIS_PASSWORD": c.Redis.Password, "REDIS_TLS_CA_FILE": c.Redis.CAFile,
		"REDIS_TLS_CERT_FILE": c.Redis.CertFile, "REDIS_TLS_KEY_FILE": c.Redis.KeyFile, "REDIS_TIMEOUT": c.Redis.Timeout.String(),
		"REDIS_KEY_PREFIX": c.Stock.Prefix, "KAFKA_BROKERS": strings.Join(c.Kafka.Brokers, ","), "KAFKA_TOPIC": c.Kafka.Topic,
		"KAFKA_DLQ_TOPIC": c.Kafka.DLQTopic, "METRICS_ADDR": c.Telemetry.MetricsAddr, "RECONCILE_INTERVAL": c.Reconciler.Interval.String(),
		"TRACE_STORE_DIR": c.Telemetry.TraceStoreDir, "TRACE_QUERY_URL": c.TraceQueryURL}
	return func(name string) string {
		if v, ok := given[name]; ok {
			return v
		}
		return getenv(name)
	}
}

// runLocate is `orderpipe locate args...` on cfg's pipeline, in process.
func runLocate(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	return asError(locate.Main(ctx, args, cfg.env(), stdout, os.Stderr))
}

// runDLQ is `orderpipe dlq args...` on cfg's pipeline, in process.
func runDLQ(ctx context.Context, cfg config, args []string, stdout, stderr io.Writer) error {
	return asError(dlq.Main(ctx, args, cfg.env(), stdout, stderr))
}

// runReconciler is `orderpipe reconciler args...` on cfg's pipeline, in
// process (logging to the default logger, which log is ignored for).
func runReconciler(ctx context.Context, _ *slog.Logger, cfg config, args []string, stdout io.Writer) int {
	return reconciler.Main(ctx, args, cfg.env(), stdout, os.Stderr)
}

func asError(code int) error {
	if code == 0 {
		return nil
	}
	return setting.ExitCode(code)
}
