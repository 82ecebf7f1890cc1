// Command orderpipe is the one binary of the pipeline; its first argument
// picks the components to run (like Loki's targets): `all` runs everything
// in one process, each component alone is how it scales out.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"orderpipe/bench"
	"orderpipe/closer"
	"orderpipe/gateway"
	"orderpipe/pkg/clock"
	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/events"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/secret"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/worker"
)

// The commands, their usage and the checks of their arguments are in cli.go.

func main() {
	log := telemetry.NewLogger()
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, os.Args[1:]); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			reportUsageError(os.Stderr, ue)
			os.Exit(2)
		}
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		log.Error("orderpipe failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, args []string) error {
	// Help, version, env and a wrong command line are answered from the
	// arguments alone: nothing below runs for them.
	if done, err := preflight(args, os.Stdout); done {
		return err
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	// Every order request allocates; collecting half as often buys 10–20 %
	// more throughput for ≈15 MiB (docs/benchmarks.md). A GOGC in the
	// environment was already applied by the runtime; GOGC_FILE it does not
	// read, so that one (like the default) is applied here.
	if _, inEnv := os.LookupEnv("GOGC"); !inEnv {
		debug.SetGCPercent(cfg.GCPercent)
	}
	if cfg.ClockFile != "" {
		// The chaos suite's clock steps (development builds only).
		err := clock.Watch(ctx, cfg.ClockFile, 100*time.Millisecond, func(from, to time.Duration, err error) {
			if err != nil {
				log.Warn("clock offset file unreadable: keeping the offset", "offset", from.String(), "err", err)
				return
			}
			log.Warn("wall clock stepped", "from_offset", from.String(), "to_offset", to.String())
		})
		if err != nil {
			return err
		}
		if off := clock.Offset(); off != 0 {
			log.Warn("wall clock stepped at start", "offset", off.String())
		}
	}
	switch args[0] {
	case "all", "gateway", "worker", "closer", "reconciler", "relay":
		shutdown, err := telemetry.SetupTracing(ctx, "orderpipe-"+args[0])
		if err != nil {
			return err
		}
		if telemetry.TracingOn() {
			log.Info("tracing on", "endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")+os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
				"sampler", os.Getenv("OTEL_TRACES_SAMPLER"), "sampler_arg", os.Getenv("OTEL_TRACES_SAMPLER_ARG"),
				"trace_store", os.Getenv(telemetry.TraceStoreEnv))
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := shutdown(sctx); err != nil {
				log.Warn("flushing traces", "err", err)
			}
		}()
	}
	switch args[0] {
	case "locate":
		return runLocate(ctx, cfg, args[1:], os.Stdout)
	case "dlq":
		return runDLQ(ctx, cfg, args[1:], os.Stdout, os.Stderr)
	case "migrate":
		return migrate(ctx, log, cfg)
	case "all":
		return runAll(ctx, log, cfg)
	case "gateway":
		return runComponents(ctx, log, cfg, components{gateway: true}, nil)
	case "worker":
		return runComponents(ctx, log, cfg, components{worker: true}, nil)
	case "kafka":
		return runKafka(ctx, log, cfg)
	case "topics":
		if len(cfg.KafkaBrokers) == 0 {
			return errors.New("KAFKA_BROKERS is empty: topics are created on a real cluster (the embedded broker creates its own)")
		}
		if err := ensureTopics(ctx, cfg); err != nil {
			return err
		}
		log.Info("topics ready", "topics", []string{cfg.KafkaTopic, cfg.KafkaDLQTopic, cfg.KafkaStatusTopic}, "partitions", cfg.KafkaParts,
			"replication_factor", cfg.KafkaRF)
		return nil
	case "closer":
		return runComponents(ctx, log, cfg, components{closer: true}, nil)
	case "relay":
		return runComponents(ctx, log, cfg, components{relay: true}, nil)
	case "reconciler":
		if code := runReconciler(ctx, log, cfg, args[1:], os.Stdout); code != 0 {
			return exitCode(code)
		}
		return nil
	case "events":
		if code := events.Main(ctx, events.Env{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaStatusTopic, Security: cfg.KafkaSecurity}, args[1:], os.Stdout, os.Stderr); code != 0 {
			return exitCode(code)
		}
		return nil
	case "bench":
		env := bench.Env{HTTPAddr: cfg.HTTPAddr, AdminToken: cfg.AdminToken, DatabaseURL: cfg.DatabaseURL,
			Redis: cfg.redis(), RedisPrefix: cfg.RedisPrefix, KafkaBrokers: cfg.KafkaBrokers, StatusTopic: cfg.KafkaStatusTopic,
			Security: cfg.KafkaSecurity}
		if len(env.KafkaBrokers) == 0 {
			// `make run`: the embedded broker of `all` (the audit's I7).
			env.KafkaBrokers = []string{fmt.Sprintf("127.0.0.1:%d", cfg.KafkaPort)}
		}
		if code := bench.Main(ctx, env, args[1:], os.Stdout, secret.Writer(os.Stderr)); code != 0 {
			return exitCode(code)
		}
		return nil
	}
	return &usageError{err: fmt.Errorf("unknown command %q", args[0])}
}

func migrate(ctx context.Context, log *slog.Logger, cfg config) error {
	if err := database.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	pool, err := database.Open(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := database.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	log.Info("migrated", "database", database.Redact(cfg.DatabaseURL), "applied", applied)
	return nil
}

// errNoEmbedded is what `all` without KAFKA_BROKERS and `kafka` answer in
// the production build, which links no test fake (standin_prod.go).
var errNoEmbedded = errors.New("the embedded broker is not in this build: set KAFKA_BROKERS, or build with -tags dev (make run does)")

// runAll is the local default: the database is created and migrated, and an
// embedded broker stands in for Kafka unless KAFKA_BROKERS is set (likewise
// for Redis and Postgres when unset and absent, see startStandins).
func runAll(ctx context.Context, log *slog.Logger, cfg config) error {
	// The broker first: a production build, which has none, refuses
	// before touching anything.
	kafkaDesc := strings.Join(cfg.KafkaBrokers, ",")
	embedded := len(cfg.KafkaBrokers) == 0
	if embedded {
		brokers, stop, err := startBroker(cfg)
		if errors.Is(err, errNoEmbedded) {
			return err
		}
		if err != nil {
			return fmt.Errorf("%w (set KAFKA_EMBEDDED_PORT to another port, or KAFKA_BROKERS to a real cluster)", err)
		}
		defer stop()
		cfg.KafkaBrokers = brokers
		cfg.KafkaSecurity = event.Security{} // the embedded broker speaks plaintext
		kafkaDesc = "embedded kfake at " + strings.Join(brokers, ",")
	}
	stopStandins, err := startStandins(ctx, log, &cfg)
	if err != nil {
		return err
	}
	defer stopStandins()
	if err := migrate(ctx, log, cfg); err != nil {
		return err
	}
	if !embedded {
		if err := ensureTopics(ctx, cfg); err != nil {
			return err
		}
	}
	port := cfg.HTTPAddr
	if _, p, err := net.SplitHostPort(cfg.HTTPAddr); err == nil {
		port = p
	}
	try := fmt.Sprintf("curl -s localhost:%s/healthz", port)
	if cfg.AdminToken == "" {
		try += "  (admin API off: set ADMIN_TOKEN to create activities)"
	}
	log.Info("orderpipe all starting",
		"http", cfg.HTTPAddr, "postgres", database.Redact(cfg.DatabaseURL), "redis", cfg.redis().String(), "kafka", kafkaDesc,
		"try", try)
	return runComponents(ctx, log, cfg, components{gateway: true, worker: true, closer: true, relay: true}, nil)
}

// ensureTopics creates the order and dead-letter topics if missing.
func ensureTopics(ctx context.Context, cfg config) error {
	return cfg.KafkaSecurity.EnsureTopics(ctx, cfg.KafkaBrokers, cfg.KafkaParts, cfg.KafkaRF, cfg.KafkaTopic, cfg.KafkaDLQTopic,
		cfg.KafkaStatusTopic)
}

// components picks what a process runs.
type components struct {
	gateway, worker, closer, relay bool
}

// runComponents starts the chosen components and waits until ctx ends and
// they have drained. ln, when not nil, is the gateway's listener (tests).
func runComponents(ctx context.Context, log *slog.Logger, cfg config, comps components, ln net.Listener) error {
	if (comps.gateway || comps.worker || comps.relay) && len(cfg.KafkaBrokers) == 0 {
		return errors.New("KAFKA_BROKERS is empty: set it, or use `orderpipe all` for the embedded broker")
	}
	log.Info("starting", "gateway", comps.gateway, "worker", comps.worker, "closer", comps.closer, "relay", comps.relay,
		"postgres", database.Redact(cfg.DatabaseURL), "redis", cfg.redis().String(), "kafka", strings.Join(cfg.KafkaBrokers, ","),
		"kafka_security", cfg.KafkaSecurity.String())
	pool, err := openPool(ctx, log, cfg, comps)
	if err != nil {
		return err
	}
	defer pool.Close()
	// One address: a single Redis; several: a Redis Cluster (every script
	// touches the keys of one hash tag, so it runs on any cluster layout).
	// MaxRetries -1: go-redis would resend a command or pipeline whose reply
	// did not come in time, and a hung Redis would hold a request for
	// several REDIS_TIMEOUTs. Every caller decides itself what a failure
	// means: the gateway gives the reservation back, the others retry later.
	// A Cluster client still resends (up to its MaxRedirects): it follows
	// MOVED and ASK, and sends again a command whose connection failed or
	// timed out after it was written. So every script is safe to run twice:
	// the reserve's second run replays the first, a lock acquisition's
	// answers the same fencing token, a stock release's finds its fate
	// recorded; a lock release run twice can only report the lock lost.
	rdb, err := cfg.redis().New(redisconn.Options{PoolSize: 256, MinIdleConns: 16, MaxRetries: -1})
	if err != nil {
		return err
	}
	defer rdb.Close()
	telemetry.InstrumentRedis(rdb)
	if err := waitReachable(ctx, log, "redis", func(ctx context.Context) error { return rdb.Ping(ctx).Err() }); err != nil {
		return fmt.Errorf("reaching redis at %s: %w", cfg.redis(), err)
	}
	metrics := telemetry.NewMetrics()
	st := stock.New(rdb, cfg.RedisPrefix)
	if err := st.WaitForReplicas(cfg.RedisWait); err != nil {
		return fmt.Errorf("REDIS_WAIT_REPLICAS: %w", err)
	}
	orders := order.NewStore(pool)

	var wg sync.WaitGroup
	errc := make(chan error, 8) // one per started component
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}

	if comps.worker {
		dlq := event.NewWriter(event.WriterConfig{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaDLQTopic, BatchTimeout: cfg.KafkaBatchWait,
			Security: cfg.KafkaSecurity})
		defer dlq.Close()
		w := worker.New(worker.Config{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaTopic, DLQTopic: cfg.KafkaDLQTopic,
			GroupID: cfg.KafkaGroup, BatchSize: cfg.BatchSize, BatchWait: cfg.BatchWait, BreakerOpenFor: cfg.BreakerOpenFor,
			LagInterval: cfg.LagInterval, Security: cfg.KafkaSecurity},
			worker.Deps{Orders: orders, Stock: st, DLQ: dlq, Metrics: metrics, Log: log.With("component", "worker")})
		start("worker", w.Run)
		events := event.NewWriter(event.WriterConfig{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaTopic, BatchTimeout: cfg.KafkaBatchWait,
			Security: cfg.KafkaSecurity})
		defer events.Close()
		rd := worker.NewRedriver(worker.RedriveConfig{After: cfg.RedriveAfter, Interval: cfg.RedriveInterval, Topic: cfg.KafkaTopic},
			worker.RedriveDeps{Orders: orders, Stock: st, Events: events, Locker: lock.New(rdb, cfg.RedisPrefix),
				Metrics: metrics, Log: log.With("component", "redrive")})
		start("redrive", rd.Run)
		mv := worker.NewMover(worker.MoverConfig{Interval: cfg.MoveInterval}, orders, st, log.With("component", "mover"))
		start("mover", mv.Run)
	}
	if comps.closer {
		c := closer.New(closer.Config{CloseAfter: cfg.CloseAfter, Interval: cfg.CloserInterval},
			closer.Deps{Orders: orders, Stock: st, Metrics: metrics, Log: log.With("component", "closer")})
		start("closer", c.Run)
	}
	if comps.relay {
		start("relay", startRelay(cfg, orders, metrics, log))
	}
	if comps.gateway {
		writer := gatewayProducer(cfg, metrics)
		defer writer.Close()
		gw := gateway.New(gateway.Config{Addr: cfg.HTTPAddr, AdminToken: cfg.AdminToken, ProduceTimeout: cfg.ProduceTimeout, ReplayWait: cfg.ReplayWait, ReserveTimeout: cfg.RedisTimeout,
			AdminAddr: cfg.AdminAddr, APITokens: cfg.APITokens, UserRPS: cfg.UserRPS, UserBurst: cfg.UserBurst, GlobalRPS: cfg.GlobalRPS,
			BreakerOpenFor: cfg.BreakerOpenFor, Topic: cfg.KafkaTopic},
			gateway.Deps{Stock: st, Orders: orders, Producer: writer, Metrics: metrics, Log: log.With("component", "gateway"),
				Ready: readyChecks(rdb, cfg.KafkaBrokers, cfg.KafkaSecurity)})
		start("gateway", func(ctx context.Context) error {
			if ln != nil {
				return gw.Serve(ctx, ln)
			}
			return gw.Run(ctx)
		})
	} else {
		start("metrics", func(ctx context.Context) error { return serveMetrics(ctx, cfg.MetricsAddr, metrics) })
	}

	if cfg.PprofAddr != "" {
		start("pprof", func(ctx context.Context) error { return servePprof(ctx, cfg.PprofAddr) })
	}

	<-ctx.Done()
	log.Info("stopping: draining in-flight work")
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		return errors.New("components did not stop within 30s")
	}
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	log.Info("stopped")
	return errors.Join(errs...)
}

// openPool opens the Postgres pool. A gateway alone starts without
// Postgres: taking an order never needs it, so a gateway started (or
// restarted, or added by the autoscaler) during a Postgres outage serves
// orders, and its lookups answer 503 until Postgres returns. A process with
// a worker or closer needs Postgres for its main job and refuses to start
// without it (the orchestrator retries).
func openPool(ctx context.Context, log *slog.Logger, cfg config, comps components) (*pgxpool.Pool, error) {
	pool, err := database.OpenLazy(ctx, cfg.DatabaseURL, int32(cfg.DBMaxConns))
	if err != nil {
		return nil, err
	}
	if comps.worker || comps.closer || comps.relay {
		if err := waitReachable(ctx, log, "postgres", pool.Ping); err != nil {
			pool.Close()
			return nil, fmt.Errorf("pinging database %s: %w", database.Redact(cfg.DatabaseURL), err)
		}
		return pool, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		log.Warn("postgres unreachable at start: taking orders; order lookups, pay and the admin API answer 503 until it answers",
			"database", database.Redact(cfg.DatabaseURL), "err", err)
	}
	return pool, nil
}

// startupWait is how long a starting process waits for a dependency it
// cannot reach (a network error: refused, reset, timed out): a restart
// during a blip — a Redis failover, a Postgres restart, a reset link —
// rides it out instead of exiting. Any other error (a refused password, a
// bad certificate) ends the start at once.
const startupWait = 30 * time.Second

// waitReachable pings until it answers, retrying transient errors for up to
// startupWait (each ping bounded by 5 s).
func waitReachable(ctx context.Context, log *slog.Logger, what string, ping func(context.Context) error) error {
	deadline := time.Now().Add(startupWait)
	backoff := 100 * time.Millisecond
	for warned := false; ; {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := ping(pctx)
		cancel()
		if err == nil || !transient(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		if !warned {
			log.Warn(what+" unreachable at start: retrying", "for", startupWait, "err", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// transient reports whether err is a network failure that may pass: the
// connection refused, reset or cut, or no answer in time. A TLS alert, a
// certificate or a name that does not resolve is not.
func transient(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded)
}

// readyChecks are what the gateway's /readyz asks: the dependencies of
// taking an order (the reserve script in Redis, the produce to Kafka). Not
// Postgres: POST /v1/orders never touches it, and during a Postgres outage
// the queue holds the accepted orders until the workers catch up, so the
// gateways must stay in service (order lookups, pay and the admin API answer
// 503 meanwhile). The other components serve no traffic and have no
// readiness beyond /healthz: each waits for its own dependencies.
func readyChecks(rdb redis.UniversalClient, brokers []string, sec event.Security) map[string]gateway.PingFunc {
	return map[string]gateway.PingFunc{
		"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		"kafka": func(ctx context.Context) error { return sec.Ping(ctx, brokers) },
	}
}

func serveMetrics(ctx context.Context, addr string, m *telemetry.Metrics) error {
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

// gatewayProducer is the gateway's producer (GATEWAY_PRODUCER).
func gatewayProducer(cfg config, m *telemetry.Metrics) interface {
	gateway.Producer
	Close() error
} {
	if cfg.GatewayProducer == "writer" {
		return event.NewWriter(event.WriterConfig{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaTopic, BatchTimeout: cfg.KafkaBatchWait,
			Security: cfg.KafkaSecurity})
	}
	return event.NewProducer(event.ProducerConfig{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaTopic, Security: cfg.KafkaSecurity,
		OnBatch: func(n int) { m.ProduceBatch.Observe(float64(n)) }})
}

// servePprof serves Go's runtime profiles (PPROF_ADDR) on their own
// listener, so they are never reachable through the public API port.
func servePprof(ctx context.Context, addr string) error {
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
