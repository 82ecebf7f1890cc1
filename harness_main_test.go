package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"

	"orderpipe/pkg/dlq"
	"orderpipe/pkg/locate"
	"orderpipe/pkg/setting"
	"orderpipe/reconciler"
)

// env is the environment a subcommand's Main sees in the end-to-end tests:
// the settings the pipeline was given (cfg), the process's environment and
// the declared defaults for the rest.
func (c config) env() setting.Env {
	given := map[string]string{"DATABASE_URL": c.DatabaseURL, "REDIS_ADDR": c.RedisAddr, "REDIS_URL": c.RedisURL,
		"REDIS_USERNAME": c.RedisUsername, "REDIS_PASSWORD": c.RedisPassword, "REDIS_TLS_CA_FILE": c.RedisTLSCA,
		"REDIS_TLS_CERT_FILE": c.RedisTLSCert, "REDIS_TLS_KEY_FILE": c.RedisTLSKey, "REDIS_TIMEOUT": c.RedisTimeout.String(),
		"REDIS_KEY_PREFIX": c.RedisPrefix, "KAFKA_BROKERS": strings.Join(c.KafkaBrokers, ","), "KAFKA_TOPIC": c.KafkaTopic,
		"KAFKA_DLQ_TOPIC": c.KafkaDLQTopic, "METRICS_ADDR": c.MetricsAddr, "RECONCILE_INTERVAL": c.ReconcileInterval.String(),
		"TRACE_STORE_DIR": c.TraceStoreDir, "TRACE_QUERY_URL": c.TraceQueryURL}
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
	return exitCode(code)
}
