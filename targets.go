package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"orderpipe/closer"
	"orderpipe/gateway"
	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/target"
	"orderpipe/reconciler"
	"orderpipe/worker"
	"orderpipe/worker/delivery"
	"orderpipe/worker/relay"
)

// targets are every target (pkg/target), wired from cfg; adding a component
// is one row (and a line in `all`, to run it there). A setup may point cfg
// elsewhere before the shared connections open.
func targets(cfg *config) target.Table {
	return target.Table{
		"all":   {Deps: []string{"local", "gateway", "worker", "closer", "relay", "webhook"}},
		"local": {Setup: func(ctx context.Context, log *slog.Logger) (func(), error) { return localSetup(ctx, log, cfg) }},
		"gateway": {Kafka: true,
			Start: func(p *target.Process) (func(), error) {
				g := cfg.Gateway
				g.CloseAfter = cfg.Closer.CloseAfter // an order's payBy: the closer's CLOSE_AFTER
				return gateway.Start(p, g)
			}},
		"worker": {Kafka: true, Postgres: true,
			Start: func(p *target.Process) (func(), error) {
				w := cfg.Worker
				w.CloseAfter = cfg.Closer.CloseAfter // the payBy of an UNPAID event
				return worker.Start(p, w)
			}},
		"closer": {Postgres: true,
			Start: func(p *target.Process) (func(), error) { return closer.Start(p, cfg.Closer) }},
		"relay": {Kafka: true, Postgres: true,
			Start: func(p *target.Process) (func(), error) { return relay.Start(p, cfg.Relay) }},
		"webhook": {Postgres: true,
			Start: func(p *target.Process) (func(), error) { return delivery.Start(p, cfg.Webhook) }},
		"reconciler": {Postgres: true,
			Start: func(p *target.Process) (func(), error) { return reconciler.Start(p, cfg.Reconciler) }},
	}
}

// components names the targets a process runs.
type components []string

// runComponents runs the targets named and their dependencies until ctx ends
// and they have drained. ln, when not nil, is the gateway's listener (tests).
func runComponents(ctx context.Context, log *slog.Logger, cfg config, names components, ln net.Listener) error {
	table := targets(&cfg)
	if requireSigningKey && cfg.Kafka.SigningKey == "" {
		for _, n := range table.Resolve(names) {
			if n == "gateway" || n == "worker" {
				// The signature is what tells the gateway's events from a
				// message anyone could write to the topic: with the public
				// development key it tells nothing. Refused before anything
				// starts, as any bad setting.
				log.Error("orderpipe failed", "err", "bad configuration: EVENT_SIGNING_KEY (or EVENT_SIGNING_KEY_FILE) is empty: "+
					"the gateway signs and the worker checks every event with it; set the same secret on both (the development build, make run, uses a public key)")
				return setting.ExitCode(2)
			}
		}
	}
	return target.Run(ctx, log, table, names, &cfg.Shared, ln)
}

// errNoEmbedded is what `all` without KAFKA_BROKERS and `kafka` answer in
// the production build, which links no test fake (standin_prod.go).
// dialFunc connects to a broker (event.Security.Dial).
type dialFunc = func(ctx context.Context, network, address string) (net.Conn, error)

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
	kafkaDesc := strings.Join(cfg.Kafka.Brokers, ",")
	embedded := len(cfg.Kafka.Brokers) == 0
	if embedded {
		brokers, dial, stopBroker, err := startBroker(*cfg)
		if errors.Is(err, errNoEmbedded) {
			// KAFKA_BROKERS empty where nothing can stand in: a bad setting.
			log.Error("orderpipe failed", "err", "bad configuration: KAFKA_BROKERS is empty: "+err.Error())
			return nil, setting.ExitCode(2)
		}
		if err != nil {
			return nil, fmt.Errorf("%w (set KAFKA_EMBEDDED_PORT to another port, or KAFKA_BROKERS to a real cluster)", err)
		}
		stops = append(stops, stopBroker)
		cfg.Kafka.Brokers = brokers
		cfg.Kafka.Security = event.Security{Dial: dial} // plaintext, through memory
		kafkaDesc = "embedded kfake at " + strings.Join(brokers, ",")
	}
	stopStandins, err := startStandins(ctx, log, cfg)
	if err != nil {
		stop()
		return nil, err
	}
	stops = append(stops, stopStandins)
	if err := prepareDatabase(ctx, log, cfg.Database.URL); err != nil {
		stop()
		return nil, err
	}
	if !embedded {
		if err := waitKafka(ctx, log, cfg.Kafka); err != nil {
			stop()
			return nil, err
		}
		if err := cfg.Kafka.EnsureTopics(ctx); err != nil {
			stop()
			return nil, err
		}
	}
	port := cfg.Gateway.Addr
	if _, p, err := net.SplitHostPort(cfg.Gateway.Addr); err == nil {
		port = p
	}
	try := fmt.Sprintf("curl -s localhost:%s/healthz", port)
	if cfg.Gateway.AdminToken == "" {
		try += "  (admin API off: set ADMIN_TOKEN to create activities)"
	}
	log.Info("orderpipe all starting",
		"http", cfg.Gateway.Addr, "postgres", database.Redact(cfg.Database.URL), "redis", cfg.Redis.String(), "kafka", kafkaDesc,
		"try", try)
	return stop, nil
}

// prepareDatabase creates the database if missing and migrates it, first
// waiting, like every long-running target (pkg/target), up to 30 s for a
// server that is starting up, in recovery or briefly unreachable. The wait
// only connects; the creation and the migrations run after it, outside
// its 5 s bound per attempt.
func prepareDatabase(ctx context.Context, log *slog.Logger, url string) error {
	if err := waitPostgres(ctx, log, url); err != nil {
		return err
	}
	return database.Prepare(ctx, log, url)
}

// migrateCommand is `orderpipe migrate`: prepareDatabase, exiting 2 when
// the server never answered.
func migrateCommand(ctx context.Context, log *slog.Logger, url string) error {
	if err := couldNotRun(log, "postgres", waitPostgres(ctx, log, url)); err != nil {
		return err
	}
	return database.Prepare(ctx, log, url)
}

// waitPostgres waits up to 30 s for the server of url to answer.
func waitPostgres(ctx context.Context, log *slog.Logger, url string) error {
	return target.WaitReachable(ctx, log, "postgres", func(ctx context.Context) error { return database.PingServer(ctx, url) })
}

// couldNotRun is the exit of a one-shot command whose store never
// answered: 2, "could not run", as the reconciler, locate, events and dlq
// exit then (1 is left for a command that ran and failed).
func couldNotRun(log *slog.Logger, what string, err error) error {
	if err == nil {
		return nil
	}
	log.Error("orderpipe could not run", "dependency", what, "err", err)
	return setting.ExitCode(2)
}

// waitKafka waits, like prepareDatabase, up to 30 s for a broker of
// KAFKA_BROKERS that is starting or briefly unreachable, before the topics
// are created there; a refused login or certificate ends it at once. No
// brokers: nothing to wait for (the caller says what is missing).
func waitKafka(ctx context.Context, log *slog.Logger, c event.Config) error {
	if len(c.Brokers) == 0 {
		return nil
	}
	return target.WaitReachable(ctx, log, "kafka", func(ctx context.Context) error { return c.Security.Ping(ctx, c.Brokers) })
}
