package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"orderpipe/closer"
	"orderpipe/gateway"
	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/relay"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/reconciler"
	"orderpipe/worker"
)

// A target is what a process can run, like a module of Loki's: the targets
// it includes (started first), whether it refuses to start without
// KAFKA_BROKERS and waits for Postgres, setup (run before the shared
// connections open; it may point the configuration elsewhere) and start
// (its components on the shared connections). Each returns its stop, run
// once every component has drained.
type target struct {
	deps            []string
	kafka, postgres bool
	setup           func(ctx context.Context, log *slog.Logger, cfg *config) (stop func(), err error)
	start           func(p *process) (stop func(), err error)
}

// targets are every target; adding a component is one row (and a line in
// `all`, to run it there).
var targets = map[string]target{
	"all":        {deps: []string{"local", "gateway", "worker", "closer", "relay"}},
	"local":      {setup: localSetup},
	"gateway":    {kafka: true, start: gatewayTarget},
	"worker":     {kafka: true, postgres: true, start: workerTarget},
	"closer":     {postgres: true, start: closerTarget},
	"relay":      {kafka: true, postgres: true, start: relayTarget},
	"reconciler": {postgres: true, start: reconcilerTarget},
}

// components names the targets a process runs.
type components []string

// resolve is names with their dependencies, each once, dependencies first.
func resolve(names components) []string {
	var out []string
	var add func(n string)
	add = func(n string) {
		if slices.Contains(out, n) {
			return
		}
		for _, d := range targets[n].deps {
			add(d)
		}
		out = append(out, n)
	}
	for _, n := range names {
		add(n)
	}
	return out
}

// process is what the targets of one process share.
type process struct {
	cfg     config
	log     *slog.Logger
	rdb     redis.UniversalClient
	stock   *stock.Store
	orders  *order.Store
	metrics *telemetry.Metrics
	// ln, when not nil, is the gateway's listener (tests).
	ln net.Listener
	// run starts a component: it runs until ctx ends, and its error stops
	// the process.
	run func(name string, fn func(context.Context) error)
	// metricsServed: a started component serves /metrics itself (the
	// gateway, on its port); else the process serves them on METRICS_ADDR.
	metricsServed bool
}

// runComponents runs the targets named and their dependencies until ctx ends
// and they have drained. ln, when not nil, is the gateway's listener (tests).
func runComponents(ctx context.Context, log *slog.Logger, cfg config, names components, ln net.Listener) error {
	named := resolve(names)
	var needKafka, needPostgres bool
	for _, n := range named {
		t, ok := targets[n]
		if !ok {
			return fmt.Errorf("unknown target %q", n)
		}
		needKafka, needPostgres = needKafka || t.kafka, needPostgres || t.postgres
		if t.setup != nil {
			stop, err := t.setup(ctx, log, &cfg)
			if err != nil {
				return err
			}
			defer stop()
		}
	}
	if needKafka && len(cfg.KafkaBrokers) == 0 {
		return errors.New("KAFKA_BROKERS is empty: set it, or use `orderpipe all` for the embedded broker")
	}
	log.Info("starting", "targets", named,
		"postgres", database.Redact(cfg.DatabaseURL), "redis", cfg.redis().String(), "kafka", strings.Join(cfg.KafkaBrokers, ","),
		"kafka_security", cfg.KafkaSecurity.String())
	pool, err := openPool(ctx, log, cfg, needPostgres)
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
	st := stock.New(rdb, cfg.RedisPrefix)
	if err := st.WaitForReplicas(cfg.RedisWait); err != nil {
		return fmt.Errorf("REDIS_WAIT_REPLICAS: %w", err)
	}

	var wg sync.WaitGroup
	errc := make(chan error, 8+len(named)) // one per started component
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &process{cfg: cfg, log: log, rdb: rdb, stock: st, orders: order.NewStore(pool), metrics: telemetry.NewMetrics(), ln: ln,
		run: func(name string, fn func(context.Context) error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(ctx); err != nil {
					errc <- fmt.Errorf("%s: %w", name, err)
					cancel()
				}
			}()
		}}
	for _, n := range named {
		if start := targets[n].start; start != nil {
			stop, err := start(p)
			if err != nil {
				cancel()
				wg.Wait()
				return err
			}
			defer stop()
		}
	}
	if !p.metricsServed {
		p.run("metrics", func(ctx context.Context) error { return telemetry.ServeMetrics(ctx, cfg.MetricsAddr, p.metrics) })
	}
	if cfg.PprofAddr != "" {
		p.run("pprof", func(ctx context.Context) error { return telemetry.ServePprof(ctx, cfg.PprofAddr) })
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

func gatewayTarget(p *process) (stop func(), err error) {
	cfg := p.cfg
	writer := gatewayProducer(cfg, p.metrics)
	gw := gateway.New(gateway.Config{Addr: cfg.HTTPAddr, AdminToken: cfg.AdminToken, ProduceTimeout: cfg.ProduceTimeout, ReplayWait: cfg.ReplayWait, ReserveTimeout: cfg.RedisTimeout,
		AdminAddr: cfg.AdminAddr, APITokens: cfg.APITokens, UserRPS: cfg.UserRPS, UserBurst: cfg.UserBurst, GlobalRPS: cfg.GlobalRPS,
		BreakerOpenFor: cfg.BreakerOpenFor, Topic: cfg.KafkaTopic},
		gateway.Deps{Stock: p.stock, Orders: p.orders, Producer: writer, Metrics: p.metrics, Log: p.log.With("component", "gateway"),
			Ready: readyChecks(p.stock, cfg.KafkaBrokers, cfg.KafkaSecurity)})
	p.run("gateway", func(ctx context.Context) error {
		if p.ln != nil {
			return gw.Serve(ctx, p.ln)
		}
		return gw.Run(ctx)
	})
	p.metricsServed = true
	return func() { writer.Close() }, nil
}

// workerTarget starts the consumer, the journal redrive and the mover.
func workerTarget(p *process) (stop func(), err error) {
	cfg := p.cfg
	dlq := event.NewWriter(event.WriterConfig{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaDLQTopic, BatchTimeout: cfg.KafkaBatchWait,
		Security: cfg.KafkaSecurity})
	w := worker.New(worker.Config{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaTopic, DLQTopic: cfg.KafkaDLQTopic,
		GroupID: cfg.KafkaGroup, BatchSize: cfg.BatchSize, BatchWait: cfg.BatchWait, BreakerOpenFor: cfg.BreakerOpenFor,
		LagInterval: cfg.LagInterval, Security: cfg.KafkaSecurity},
		worker.Deps{Orders: p.orders, Stock: p.stock, DLQ: dlq, Metrics: p.metrics, Log: p.log.With("component", "worker")})
	p.run("worker", w.Run)
	events := event.NewWriter(event.WriterConfig{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaTopic, BatchTimeout: cfg.KafkaBatchWait,
		Security: cfg.KafkaSecurity})
	rd := worker.NewRedriver(worker.RedriveConfig{After: cfg.RedriveAfter, Interval: cfg.RedriveInterval, Topic: cfg.KafkaTopic},
		worker.RedriveDeps{Orders: p.orders, Stock: p.stock, Events: events, Locker: lock.New(p.rdb, cfg.RedisPrefix),
			Metrics: p.metrics, Log: p.log.With("component", "redrive")})
	p.run("redrive", rd.Run)
	mv := worker.NewMover(worker.MoverConfig{Interval: cfg.MoveInterval}, p.orders, p.stock, p.log.With("component", "mover"))
	p.run("mover", mv.Run)
	return func() { events.Close(); dlq.Close() }, nil
}

func closerTarget(p *process) (stop func(), err error) {
	c := closer.New(closer.Config{CloseAfter: p.cfg.CloseAfter, Interval: p.cfg.CloserInterval},
		closer.Deps{Orders: p.orders, Stock: p.stock, Metrics: p.metrics, Log: p.log.With("component", "closer")})
	p.run("closer", c.Run)
	return func() {}, nil
}

// relayTarget publishes the orders.status outbox (pkg/relay).
func relayTarget(p *process) (stop func(), err error) {
	cfg := p.cfg
	w := event.NewWriter(event.WriterConfig{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaStatusTopic, BatchTimeout: cfg.KafkaBatchWait,
		Security: cfg.KafkaSecurity})
	r := relay.New(relay.Config{Topic: cfg.KafkaStatusTopic, Interval: cfg.RelayInterval, BatchSize: cfg.RelayBatchSize,
		Retention: cfg.StatusRetention}, relay.Deps{Orders: p.orders, Writer: w, Metrics: p.metrics, Log: p.log.With("component", "relay")})
	p.run("relay", r.Run)
	return func() { w.Close() }, nil
}

// reconcilerTarget runs the reconciler's loop (RECONCILE_INTERVAL) beside the
// other targets; `orderpipe reconciler` alone is reconciler.Main (its flags,
// reports and exit codes).
func reconcilerTarget(p *process) (stop func(), err error) {
	rec := reconciler.New(reconciler.Config{Interval: p.cfg.ReconcileInterval}, reconciler.Deps{Orders: p.orders, Stock: p.stock,
		Locker: lock.New(p.rdb, p.cfg.RedisPrefix), Metrics: p.metrics, Log: p.log.With("component", "reconciler")})
	p.run("reconciler", rec.Run)
	return func() {}, nil
}

// errNoEmbedded is what `all` without KAFKA_BROKERS and `kafka` answer in
// the production build, which links no test fake (standin_prod.go).
var errNoEmbedded = errors.New("the embedded broker is not in this build: set KAFKA_BROKERS, or build with -tags dev (make run does)")

// localSetup is what makes `all` the local default: the database is created
// and migrated, and an embedded broker stands in for Kafka unless
// KAFKA_BROKERS is set (likewise for Redis and Postgres when unset and
// absent, see startStandins).
func localSetup(ctx context.Context, log *slog.Logger, cfg *config) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	// The broker first: a production build, which has none, refuses
	// before touching anything.
	kafkaDesc := strings.Join(cfg.KafkaBrokers, ",")
	embedded := len(cfg.KafkaBrokers) == 0
	if embedded {
		brokers, stopBroker, err := startBroker(*cfg)
		if errors.Is(err, errNoEmbedded) {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("%w (set KAFKA_EMBEDDED_PORT to another port, or KAFKA_BROKERS to a real cluster)", err)
		}
		stops = append(stops, stopBroker)
		cfg.KafkaBrokers = brokers
		cfg.KafkaSecurity = event.Security{} // the embedded broker speaks plaintext
		kafkaDesc = "embedded kfake at " + strings.Join(brokers, ",")
	}
	stopStandins, err := startStandins(ctx, log, cfg)
	if err != nil {
		stop()
		return nil, err
	}
	stops = append(stops, stopStandins)
	if err := migrate(ctx, log, *cfg); err != nil {
		stop()
		return nil, err
	}
	if !embedded {
		if err := ensureTopics(ctx, *cfg); err != nil {
			stop()
			return nil, err
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
	return stop, nil
}

// migrate is `orderpipe migrate`.
func migrate(ctx context.Context, log *slog.Logger, cfg config) error {
	return database.Prepare(ctx, log, cfg.DatabaseURL)
}

// ensureTopics creates the order and dead-letter topics if missing.
func ensureTopics(ctx context.Context, cfg config) error {
	return cfg.KafkaSecurity.EnsureTopics(ctx, cfg.KafkaBrokers, cfg.KafkaParts, cfg.KafkaRF, cfg.KafkaTopic, cfg.KafkaDLQTopic,
		cfg.KafkaStatusTopic)
}

// topics is `orderpipe topics`.
func topics(ctx context.Context, log *slog.Logger, cfg config) error {
	if len(cfg.KafkaBrokers) == 0 {
		return errors.New("KAFKA_BROKERS is empty: topics are created on a real cluster (the embedded broker creates its own)")
	}
	if err := ensureTopics(ctx, cfg); err != nil {
		return err
	}
	log.Info("topics ready", "topics", []string{cfg.KafkaTopic, cfg.KafkaDLQTopic, cfg.KafkaStatusTopic}, "partitions", cfg.KafkaParts,
		"replication_factor", cfg.KafkaRF)
	return nil
}

// openPool opens the Postgres pool. A gateway alone starts without
// Postgres: taking an order never needs it, so a gateway started (or
// restarted, or added by the autoscaler) during a Postgres outage serves
// orders, and its lookups answer 503 until Postgres returns. A process with
// a worker or closer needs Postgres for its main job and refuses to start
// without it (the orchestrator retries).
func openPool(ctx context.Context, log *slog.Logger, cfg config, needed bool) (*pgxpool.Pool, error) {
	pool, err := database.OpenLazy(ctx, cfg.DatabaseURL, int32(cfg.DBMaxConns))
	if err != nil {
		return nil, err
	}
	if needed {
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
func readyChecks(st *stock.Store, brokers []string, sec event.Security) map[string]gateway.PingFunc {
	return map[string]gateway.PingFunc{
		"redis": st.Ping,
		"kafka": func(ctx context.Context) error { return sec.Ping(ctx, brokers) },
	}
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
