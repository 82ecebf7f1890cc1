// Package target runs the targets of one process, like the module manager
// Loki's modules.go drives: a table (name → the targets it includes, whether
// it needs Kafka and Postgres, setup, start) that the binary declares, and
// Run, which resolves the names, opens the connections they share once,
// starts each target on them and drains them all on stop.
//
// It owns the start of a process (how long to wait for a dependency, which
// errors are worth waiting out, whether Postgres may be missing); it never
// knows a component: the rows that start them are the binary's.
package target

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

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// Target is what a process can run: the targets it includes (started
// first), whether it refuses to start without KAFKA_BROKERS and waits for
// Postgres, Setup (run before the shared connections open; it may point
// the Shared settings elsewhere) and Start (its components on the shared
// connections). Each returns its stop, run once every component has
// drained.
type Target struct {
	Deps            []string
	Kafka, Postgres bool
	Setup           func(ctx context.Context, log *slog.Logger) (stop func(), err error)
	Start           func(p *Process) (stop func(), err error)
}

// Table is every target of a binary, by name.
type Table map[string]Target

// Resolve is names with their dependencies, each once, dependencies first.
func (t Table) Resolve(names []string) []string {
	var out []string
	var add func(n string)
	add = func(n string) {
		if slices.Contains(out, n) {
			return
		}
		for _, d := range t[n].Deps {
			add(d)
		}
		out = append(out, n)
	}
	for _, n := range names {
		add(n)
	}
	return out
}

// Shared are the settings of what the targets of a process share: the
// connections and the process's own listeners.
type Shared struct {
	Database  database.Config
	Redis     redisconn.Config
	Stock     stock.Config
	Kafka     event.Config
	Telemetry telemetry.Config
	// BreakerOpenFor is how long a tripped breaker refuses calls before
	// probing (BREAKER_OPEN_FOR), the gateway's and the worker's.
	BreakerOpenFor time.Duration
}

// Process is what the targets of one process share.
type Process struct {
	Cfg     Shared
	Log     *slog.Logger
	Stock   *stock.Store
	Orders  *order.Store
	Metrics *telemetry.Metrics
	// Listener, when not nil, is the gateway's listener (tests).
	Listener net.Listener

	rdb           redis.UniversalClient
	run           func(name string, fn func(context.Context) error)
	metricsServed bool
}

// Go runs a component until ctx ends; its error stops the process.
func (p *Process) Go(name string, fn func(context.Context) error) { p.run(name, fn) }

// ServesMetrics says a started component serves /metrics itself (the
// gateway, on its port); else the process serves them on METRICS_ADDR.
func (p *Process) ServesMetrics() { p.metricsServed = true }

// Locker is a lock client on the process's Redis.
func (p *Process) Locker() *lock.Locker { return lock.New(p.rdb, p.Cfg.Stock.Prefix) }

// Run runs the targets named and their dependencies until ctx ends and they
// have drained. shared is read once every Setup has run.
func Run(ctx context.Context, log *slog.Logger, table Table, names []string, shared *Shared, ln net.Listener) error {
	named := table.Resolve(names)
	need, err := table.needs(named)
	if err != nil {
		return err
	}
	// A broker the run needs and nobody named (and no Setup, such as `all`'s
	// embedded one, provides) is a bad setting: exit 2 before anything starts.
	if need.kafka && !need.setup && len(shared.Kafka.Brokers) == 0 {
		log.Error("orderpipe failed", "err", "bad configuration: KAFKA_BROKERS is empty: set it, or use `orderpipe all` for the embedded broker")
		return setting.ExitCode(2)
	}
	stopSetups, err := table.setUp(ctx, log, named)
	defer stopSetups()
	if err != nil {
		return err
	}
	cfg := *shared
	if need.kafka && len(cfg.Kafka.Brokers) == 0 {
		return errors.New("KAFKA_BROKERS is empty: set it, or use `orderpipe all` for the embedded broker")
	}
	log.Info("starting", "targets", named,
		"postgres", database.Redact(cfg.Database.URL), "redis", cfg.Redis.String(), "kafka", strings.Join(cfg.Kafka.Brokers, ","),
		"kafka_security", cfg.Kafka.Security.String())
	pool, err := openPool(ctx, log, cfg.Database, need.postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb, err := openRedis(ctx, log, cfg.Redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	st := stock.New(rdb, cfg.Stock.Prefix)
	if err := st.WaitForReplicas(cfg.Stock.Wait); err != nil {
		return fmt.Errorf("REDIS_WAIT_REPLICAS: %w", err)
	}
	p := &Process{Cfg: cfg, Log: log, rdb: rdb, Stock: st, Orders: order.NewStore(pool), Metrics: telemetry.NewMetrics(), Listener: ln}
	return p.runTargets(ctx, table, named)
}

// needs is what the targets of a run need, together.
type needs struct {
	kafka, postgres bool
	setup           bool // a Setup runs (and may provide what the settings lack)
}

func (t Table) needs(named []string) (needs, error) {
	var n needs
	for _, name := range named {
		tg, ok := t[name]
		if !ok {
			return needs{}, fmt.Errorf("unknown target %q", name)
		}
		n.kafka, n.postgres, n.setup = n.kafka || tg.Kafka, n.postgres || tg.Postgres, n.setup || tg.Setup != nil
	}
	return n, nil
}

// setUp runs each target's Setup in order. stop undoes those that ran, the
// last first; the caller runs it even when err is set.
func (t Table) setUp(ctx context.Context, log *slog.Logger, named []string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	for _, n := range named {
		if setup := t[n].Setup; setup != nil {
			s, err := setup(ctx, log)
			if err != nil {
				return stop, err
			}
			stops = append(stops, s)
		}
	}
	return stop, nil
}

// runTargets starts each target's components on p, runs them until ctx
// ends or one fails (which ends the others), and drains them; each
// target's stop runs once all have drained, the last started first.
func (p *Process) runTargets(ctx context.Context, table Table, named []string) error {
	var wg sync.WaitGroup
	errc := make(chan error, 8+len(named)) // one per started component
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.run = func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	for _, n := range named {
		if start := table[n].Start; start != nil {
			stop, err := start(p)
			if err != nil {
				cancel()
				wg.Wait()
				return err
			}
			defer stop()
		}
	}
	p.serveDiagnostics()
	<-ctx.Done()
	p.Log.Info("stopping: draining in-flight work")
	return drain(&wg, errc, p.Log)
}

// serveDiagnostics serves /metrics, unless a component serves them, and
// pprof when PPROF_ADDR is set.
func (p *Process) serveDiagnostics() {
	if !p.metricsServed {
		p.Go("metrics", func(ctx context.Context) error {
			return telemetry.ServeMetrics(ctx, p.Cfg.Telemetry.MetricsAddr, p.Metrics)
		})
	}
	if addr := p.Cfg.Telemetry.PprofAddr; addr != "" {
		p.Go("pprof", func(ctx context.Context) error { return telemetry.ServePprof(ctx, addr) })
	}
}

// drain waits for the components to return, 30 s at most, and joins their
// errors.
func drain(wg *sync.WaitGroup, errc chan error, log *slog.Logger) error {
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

// openRedis is the process's Redis client. One address: a single Redis;
// several: a Redis Cluster (every script touches the keys of one hash tag,
// so it runs on any cluster layout). MaxRetries -1: go-redis would resend a
// command or pipeline whose reply did not come in time, and a hung Redis
// would hold a request for several REDIS_TIMEOUTs. Every caller decides
// itself what a failure means: the gateway gives the reservation back, the
// others retry later. A Cluster client still resends (up to its
// MaxRedirects): it follows MOVED and ASK, and sends again a command whose
// connection failed or timed out after it was written. So every script is
// safe to run twice: the reserve's second run replays the first, a lock
// acquisition's answers the same fencing token, a stock release's finds its
// fate recorded; a lock release run twice can only report the lock lost.
func openRedis(ctx context.Context, log *slog.Logger, c redisconn.Config) (redis.UniversalClient, error) {
	rdb, err := c.New(redisconn.Options{PoolSize: 256, MinIdleConns: 16, MaxRetries: -1})
	if err != nil {
		return nil, err
	}
	telemetry.InstrumentRedis(rdb)
	if err := WaitReachable(ctx, log, "redis", func(ctx context.Context) error { return rdb.Ping(ctx).Err() }); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("reaching redis at %s: %w", c, err)
	}
	return rdb, nil
}

// openPool opens the Postgres pool. A gateway alone starts without
// Postgres: taking an order never needs it, so a gateway started (or
// restarted, or added by the autoscaler) during a Postgres outage serves
// orders, and its lookups answer 503 until Postgres returns. A process with
// a worker or closer needs Postgres for its main job and refuses to start
// without it (the orchestrator retries).
func openPool(ctx context.Context, log *slog.Logger, c database.Config, needed bool) (*pgxpool.Pool, error) {
	pool, err := database.OpenLazy(ctx, c.URL, int32(c.MaxConns))
	if err != nil {
		return nil, err
	}
	if needed {
		if err := WaitReachable(ctx, log, "postgres", pool.Ping); err != nil {
			pool.Close()
			return nil, fmt.Errorf("pinging database %s: %w", database.Redact(c.URL), err)
		}
		return pool, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		log.Warn("postgres not ready at start: taking orders; order lookups, pay and the admin API answer 503 until it answers",
			"database", database.Redact(c.URL), "err", err)
	}
	return pool, nil
}

// startupWait is how long a starting process waits for a dependency it
// cannot reach (a network error: refused, reset, timed out): a restart
// during a blip — a Redis failover, a Postgres restart, a reset link —
// rides it out instead of exiting. Any other error (a refused password, a
// bad certificate) ends the start at once.
const startupWait = 30 * time.Second

// WaitReachable pings until it answers, retrying transient errors for up to
// startupWait (each ping bounded by 5 s).
func WaitReachable(ctx context.Context, log *slog.Logger, what string, ping func(context.Context) error) error {
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
			log.Warn(what+" not ready at start: retrying", "for", startupWait.String(), "err", err)
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

// transient reports whether err may pass: a network failure (the
// connection refused, reset or cut, or no answer in time), or a server that
// answers but is not serving yet — Redis loading its dataset after a
// restart (LOADING), a replica cut from its primary while a failover is
// under way behind its address (MASTERDOWN), PostgreSQL starting up, in
// recovery or shutting down (SQLSTATE 57P03). A TLS alert, a certificate, a
// refused password or a name that does not resolve is not.
func transient(err error) bool {
	var ne net.Error
	var pgErr *pgconn.PgError
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded) ||
		redis.IsLoadingError(err) || redis.IsMasterDownError(err) ||
		errors.As(err, &pgErr) && pgErr.Code == "57P03" // cannot_connect_now
}
