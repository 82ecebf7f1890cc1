package reconciler

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"orderpipe/pkg/database"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/secret"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// Usage is `orderpipe reconciler --help`.
const Usage = `usage: orderpipe reconciler [--once] [--fix] [--json]

Compares Redis with Postgres for every preheated activity item, counting the
reservations in flight, and reports drift. Postgres is the truth.

  --once   one pass, then exit: 0 no drift, 1 drift found (and not fixed), 2 could not run
  --fix    repair Redis from Postgres (under the {reconciler}:fix lock), then check again
  --json   one JSON object per pass instead of the table

Without --once it runs a pass every RECONCILE_INTERVAL and serves /metrics on METRICS_ADDR.
`

// mainArgs are the flags of `orderpipe reconciler`.
type mainArgs struct{ once, fix, json bool }

// CheckArgs reads the flags, touching nothing (flag.ErrHelp for -h/--help).
func CheckArgs(args []string) error { _, err := parseArgs(args); return err }

func parseArgs(args []string) (mainArgs, error) {
	var a mainArgs
	fs := flag.NewFlagSet("reconciler", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&a.once, "once", false, "one pass, then exit")
	fs.BoolVar(&a.fix, "fix", false, "repair Redis from Postgres")
	fs.BoolVar(&a.json, "json", false, "JSON output")
	err := setting.ParseFlagsOnly(fs, args)
	return a, err
}

// Main is `orderpipe reconciler`: it returns the exit code and writes its
// report to stdout (logs go to the default logger).
func Main(ctx context.Context, args []string, env setting.Env, stdout, stderr io.Writer) int {
	a, err := parseArgs(args)
	if err != nil {
		fmt.Fprint(stdout, Usage)
		if errors.Is(err, flag.ErrHelp) {
			return ExitClean
		}
		return ExitError
	}
	log := slog.Default().With("component", "reconciler")
	cfg, err := readMainConfig(env)
	if err != nil {
		log.Error("reconciler cannot run", "err", err)
		return ExitError
	}
	stopTracing, err := telemetry.StartTracing(ctx, slog.Default(), "orderpipe-reconciler")
	if err != nil {
		slog.Error("orderpipe failed", "err", err)
		return 1
	}
	defer stopTracing()

	metrics := telemetry.NewMetrics()
	published := cfg.publisher(ctx, a.once, metrics, log)
	cannotRun := func(err error) int {
		log.Error("reconciler cannot run", "err", err)
		metrics.ReconcilerPasses.WithLabelValues("error").Inc()
		metrics.ReconcilerLastPassError.Set(1)
		return published(ExitError)
	}
	st, err := openStores(ctx, cfg)
	if err != nil {
		return cannotRun(err)
	}
	defer st.close()
	write := func(res Result) {
		var err error
		if a.json {
			err = res.WriteJSON(stdout)
		} else {
			err = res.WriteText(stdout)
		}
		if err != nil {
			log.Warn("writing report", "err", err)
		}
	}
	rec := New(Config{Interval: cfg.ReconcileInterval, Fix: a.fix}, Deps{
		Orders: st.orders, Stock: st.stock, Locker: st.locker, Metrics: metrics, Log: log, ReportFunc: write,
	})
	if a.once {
		res, err := rec.RunOnce(ctx) // counts an error itself
		if err != nil {
			log.Error("reconciler cannot run", "err", err)
			return published(ExitError)
		}
		write(res)
		return published(res.ExitCode())
	}
	if cfg.Pushgateway != "" {
		log.Warn("PUSHGATEWAY_URL is for --once: the loop serves /metrics on METRICS_ADDR")
	}
	return loop(ctx, rec, cfg.MetricsAddr, metrics, log, cfg.ReconcileInterval, a.fix)
}

// mainConfig is the reconciler command's settings.
type mainConfig struct {
	DatabaseURL, RedisPrefix, MetricsAddr, Pushgateway string
	ReconcileInterval                                  time.Duration
	redis                                              redisconn.Config
}

func readMainConfig(env setting.Env) (mainConfig, error) {
	r := &setting.Reader{Env: env}
	cfg := mainConfig{r.String("DATABASE_URL"), r.String("REDIS_KEY_PREFIX"), r.Addr("METRICS_ADDR", false), r.String("PUSHGATEWAY_URL"),
		r.Duration("RECONCILE_INTERVAL"), redisconn.Read(r)}
	secret.Register(secret.URLPassword(cfg.Pushgateway)...) // the safety net under redactURL
	if err := checkPushgateway(cfg.Pushgateway); err != nil {
		r.Fail("%v", err)
	}
	return cfg, r.Err()
}

// publisher is what a --once run does with its pass's metrics before it
// exits with code: nothing, or (PUSHGATEWAY_URL) push them, a failed
// pass's too. A scheduled run (the Kubernetes CronJob) is never scraped,
// so this is how its pass reaches Prometheus. A push that fails turns a
// clean exit into 2.
func (cfg mainConfig) publisher(ctx context.Context, once bool, metrics *telemetry.Metrics, log *slog.Logger) func(code int) int {
	return func(code int) int {
		if !once || cfg.Pushgateway == "" {
			return code
		}
		metrics.ReconcilerInterval.Set(cfg.ReconcileInterval.Seconds())
		if err := pushPass(ctx, cfg.Pushgateway, metrics.Registry); err != nil {
			log.Error("pushing the pass's metrics", "pushgateway", redactURL(cfg.Pushgateway), "err", err)
			if code == ExitClean { // drift (1) says more
				code = ExitError
			}
		}
		return code
	}
}

// stores are the reconciler's Postgres and Redis, and how to close them.
type stores struct {
	orders *order.Store
	stock  *stock.Store
	locker *lock.Locker
	close  func()
}

// openStores opens Postgres and Redis and checks that Redis answers.
func openStores(ctx context.Context, cfg mainConfig) (stores, error) {
	pool, err := database.Open(ctx, cfg.DatabaseURL, 4)
	if err != nil {
		return stores{}, err
	}
	rdb, err := cfg.redis.New(redisconn.Options{PoolSize: 8, DialTimeout: time.Second, ReadTimeout: 5 * time.Second})
	if err != nil {
		pool.Close()
		return stores{}, err
	}
	closeAll := func() { rdb.Close(); pool.Close() }
	telemetry.InstrumentRedis(rdb)
	if err := rdb.Ping(ctx).Err(); err != nil {
		closeAll()
		return stores{}, fmt.Errorf("reaching redis at %s: %w", cfg.redis, err)
	}
	return stores{orders: order.NewStore(pool), stock: stock.New(rdb, cfg.RedisPrefix), locker: lock.New(rdb, cfg.RedisPrefix), close: closeAll}, nil
}

// loop runs passes every interval, serving /metrics on metricsAddr, until
// ctx ends.
func loop(ctx context.Context, rec *Reconciler, metricsAddr string, metrics *telemetry.Metrics, log *slog.Logger, interval time.Duration, fix bool) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	metricsErr := make(chan error, 1)
	go func() {
		err := telemetry.ServeMetrics(ctx, metricsAddr, metrics)
		cancel()
		metricsErr <- err
	}()
	log.Info("reconciler starting", "interval", interval.String(), "fix", fix, "metrics", metricsAddr)
	runErr := rec.Run(ctx)
	cancel()
	if runErr != nil {
		log.Error("reconciler stopped", "err", runErr)
		return ExitError
	}
	if err := <-metricsErr; err != nil {
		log.Error("reconciler cannot run", "err", err)
		return ExitError
	}
	log.Info("stopped") // the last line, as every long-running command's
	return ExitClean
}
