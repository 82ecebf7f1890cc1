// Command orderpipe is the one binary of the pipeline; its first argument
// picks what runs (like Loki's targets): `all` runs every component in one
// process, each component alone is how it scales out.
//
// The root only wires. Three tables say everything it does: commands
// (cli.go: each subcommand's usage, argument check and what runs it, the
// Main of the package it drives or a target), targets (targets.go: name →
// dependencies, start, stop) and settings (config.go: the declarations each
// package makes beside its Config).
//
// Its tests, by tier (all run by make test; the end-to-end ones again on a
// real Kafka by make test-kafka, TEST_KAFKA_BROKERS):
//
//	cli_test.go config_test.go     the command line and the settings: the built
//	readme_test.go secrets_test.go binary's usage, exit codes, env, secrets
//	targets_test.go tls_test.go    wiring: the targets table, TLS to Redis, Postgres, Kafka,
//	standin_test.go                the stand-ins of `all` (dev)
//	*_e2e_test.go e2e_test.go      end to end: targets in process (harness_test.go,
//	                               harness_main_test.go) on real Postgres and Redis
//	neverlose_test.go              faults: dependencies killed, paused or cut under
//	resilience_test.go             load, nothing accepted is lost
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"orderpipe/pkg/secret"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/telemetry"
)

func main() {
	log := telemetry.NewLogger()
	slog.SetDefault(log)
	telemetry.RedisLogsTo(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, os.Args[1:]); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			reportUsageError(os.Stderr, ue)
			os.Exit(2)
		}
		var code setting.ExitCode
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
	c, ok := lookupCommand(args[0])
	if !ok || (c.main == nil && c.run == nil) {
		return &usageError{err: fmt.Errorf("unknown command %q", args[0])}
	}
	cfg, err := loadConfig()
	if err != nil {
		// Exit 2 like a bad command line: what a command answers with 1
		// (drift, an unknown requestId, nothing matched) must not be read
		// into a run that never started.
		log.Error("orderpipe failed", "err", err)
		return setting.ExitCode(2)
	}
	// Every order request allocates; collecting half as often buys 10–20 %
	// more throughput for ≈15 MiB (docs/benchmarks.md). A GOGC in the
	// environment was already applied by the runtime; GOGC_FILE it does not
	// read, so that one (like the default) is applied here.
	if _, inEnv := os.LookupEnv("GOGC"); !inEnv {
		debug.SetGCPercent(cfg.GCPercent)
	}
	limitMemory(args[0], cfg)
	if err := watchClock(ctx, log, cfg); err != nil {
		return err
	}
	if c.run != nil {
		return c.run(ctx, log, cfg)
	}
	if code := c.main(ctx, args[1:], standinEnv(getenv, os.Stderr), os.Stdout, secret.Writer(os.Stderr)); code != 0 {
		return setting.ExitCode(code)
	}
	return nil
}

// runTarget is the run of a command that is a target: tracing on, then the
// target and its dependencies until the process is stopped.
func runTarget(name string) func(ctx context.Context, log *slog.Logger, cfg config) error {
	return func(ctx context.Context, log *slog.Logger, cfg config) error {
		stopTracing, err := telemetry.StartTracing(ctx, log, "orderpipe-"+name)
		if err != nil {
			return err
		}
		defer stopTracing()
		return runComponents(ctx, log, cfg, components{name}, nil)
	}
}
