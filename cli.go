package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"orderpipe/closer"
	"orderpipe/gateway"
	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/version"
	"orderpipe/reconciler"
	"orderpipe/reconciler/locate"
	"orderpipe/worker"
	"orderpipe/worker/delivery"
	"orderpipe/worker/dlq"
	"orderpipe/worker/events"
	"orderpipe/worker/relay"
)

// command is one `orderpipe <name>`: what `orderpipe help` lists and
// `orderpipe <name> --help` prints. check reads the command's arguments
// without touching anything (no configuration, no dependency): flag.ErrHelp
// when they ask for the usage, an error naming what is wrong otherwise.
type command struct {
	name    string
	summary string // one line (continuation lines indented) for `orderpipe help`
	usage   string // the whole usage, `orderpipe <name> --help`
	check   func(args []string) error
	// usageFunc, when set, writes the usage instead of usage (bench
	// prints its flags with their defaults).
	usageFunc func(w io.Writer)
	// main runs the command once the configuration is read and checked:
	// the Main of the package it drives, given the settings (exit status
	// returned). Or run, for what the root wires itself (targets).
	main func(ctx context.Context, args []string, env setting.Env, stdout, stderr io.Writer) int
	run  func(ctx context.Context, log *slog.Logger, cfg config) error
}

func (c command) writeUsage(w io.Writer) {
	if c.usageFunc != nil {
		c.usageFunc(w)
		return
	}
	fmt.Fprint(w, c.usage)
}

const configHint = "\nConfiguration: environment variables (NAME, or NAME_FILE naming a file that holds the\nvalue), see `orderpipe env` or docs/config.md.\n"

// commands is every command, in the order `orderpipe help` lists them;
// adding one is a row here.
var commands = []command{
	{name: "all", summary: "gateway + worker + closer + relay + webhook in one process; embedded Kafka unless KAFKA_BROKERS is set (dev builds)",
		usage: `usage: orderpipe all

Runs the gateway, the worker (with the journal redrive), the closer, the
relay of orders.status and its webhook deliverer (when WEBHOOK_URLS is set)
in one process: the local default (make run). Creates the database if missing and
migrates it. With KAFKA_BROKERS set it uses that cluster and creates the
topics if missing; without, a build with -tags dev (make run) starts an
embedded Kafka-protocol broker on KAFKA_EMBEDDED_PORT, and stands in for
Redis and Postgres when their variables are unset and nothing answers.
Ctrl-C (SIGINT) or SIGTERM drains in-flight work and stops.
` + configHint, check: noArgs, run: runTarget("all")},
	{name: "gateway", summary: "the HTTP service (needs KAFKA_BROKERS)",
		usage: gateway.Usage + configHint, check: noArgs, run: runTarget("gateway")},
	{name: "worker", summary: "the Kafka consumer writing orders to Postgres (needs KAFKA_BROKERS)",
		usage: worker.Usage + configHint, check: noArgs, run: runTarget("worker")},
	{name: "closer", summary: "closes orders unpaid after CLOSE_AFTER and gives their stock back (no Kafka)",
		usage: closer.Usage + configHint, check: noArgs, run: runTarget("closer")},
	{name: "relay", summary: "publishes the orders.status outbox to KAFKA_STATUS_TOPIC (needs KAFKA_BROKERS)",
		usage: relay.Usage + configHint, check: noArgs, run: runTarget("relay")},
	{name: "webhook", summary: "delivers the orders.status outbox to WEBHOOK_URLS as signed Standard Webhooks (no Kafka)",
		usage: delivery.Usage + configHint, check: noArgs, run: runTarget("webhook")},
	{name: "reconciler", summary: "compare Redis with Postgres per item [--once] [--fix] [--json]; exit 0 clean, 1 drift, 2 could not run",
		usage: reconciler.Usage + configHint, check: reconciler.CheckArgs, main: reconciler.Main},
	{name: "locate", summary: "where one request is: orderpipe locate <requestId> [--json] [--activity A --item I]; exit 1 if unknown",
		usage: locate.Usage + configHint, check: locate.CheckArgs, main: locate.Main},
	{name: "events", summary: "tail orders.status: orderpipe events [--order-no N] [--request-id R] [--follow] [--json]; exit 1 if nothing matched",
		check: events.CheckArgs, usageFunc: events.Usage, main: events.Main},
	{name: "dlq", summary: "dead letters: orderpipe dlq list | show <p:o> | replay <p:o>...|--all [--json]; exit 1 if refused",
		usage: dlq.Usage + configHint, check: dlq.CheckArgs, main: dlq.Main},
	{name: "webhooks", summary: "webhooks that gave up: orderpipe webhooks list | replay <id>...|--all [--json]; exit 1 if refused",
		usage: delivery.CommandUsage + configHint, check: delivery.CheckArgs, main: delivery.Main},
	{name: "migrate", summary: "create the database if missing and apply the migrations",
		usage: database.MigrateUsage + configHint, check: noArgs,
		run: func(ctx context.Context, log *slog.Logger, cfg config) error {
			return migrateCommand(ctx, log, cfg.Database.URL)
		}},
	{name: "kafka", summary: "the embedded Kafka-protocol broker alone on KAFKA_EMBEDDED_PORT (dev builds; on disk with KAFKA_EMBEDDED_DIR)",
		usage: `usage: orderpipe kafka

The embedded Kafka-protocol broker (kfake) alone, on 127.0.0.1:KAFKA_EMBEDDED_PORT,
with the order, dead-letter and orders.status topics; with KAFKA_EMBEDDED_DIR
it keeps its log on disk. It deletes order events the group KAFKA_GROUP has
committed beyond KAFKA_EMBEDDED_RETENTION_MB, status events beyond as many
MiB, and dead letters beyond KAFKA_EMBEDDED_DLQ_RETENTION_MB; never an event
the group has not committed.
For multi-process local runs and the chaos suite. Only in builds
with -tags dev (make build-dev, make run): the production build has no
embedded broker.
` + configHint, check: noArgs, main: kafkaMain},
	{name: "topics", summary: "create the order, dead-letter and status topics on KAFKA_BROKERS if missing (KAFKA_PARTITIONS, KAFKA_REPLICATION_FACTOR)",
		usage: event.TopicsUsage + configHint, check: noArgs,
		run: func(ctx context.Context, log *slog.Logger, cfg config) error {
			if len(cfg.Kafka.Brokers) == 0 { // could not run, as dlq and events say it
				log.Error("orderpipe failed", "err", "KAFKA_BROKERS is empty: topics are created on a real cluster (the embedded broker creates its own)")
				return setting.ExitCode(2)
			}
			if err := couldNotRun(log, "kafka", waitKafka(ctx, log, cfg.Kafka)); err != nil {
				return err
			}
			return cfg.Kafka.CreateTopics(ctx, log)
		}},
	{name: "bench", summary: "load-test a running pipeline and audit the invariants [-c N] [-n N] (bench -h; dev builds)",
		check: benchCheck, usageFunc: benchUsage, main: benchMain},
	{name: "env", summary: "print every environment variable with its default",
		usage: `usage: orderpipe env

Prints every environment variable orderpipe reads, with its default and
meaning (defaults only: never the values set, so never a secret). Each can
also be given as NAME_FILE, the path of a file holding the value.
`, check: noArgs},
	{name: "version", summary: "print the version, commit and Go version of this build",
		usage: `usage: orderpipe version

Prints the build's version (stamped by make build / the Dockerfile), the
commit it was built from (and whether the tree was modified) and the Go
version. The same labels are on every process's orderpipe_build_info metric.
`, check: noArgs},
	{name: "help", summary: "this list, or a command's usage: orderpipe help <command>",
		usage: "usage: orderpipe help [command]\n", check: func(args []string) error {
			switch {
			case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
				return flag.ErrHelp
			case len(args) > 1:
				return fmt.Errorf("unexpected argument %q", args[1])
			}
			return nil // the command named is looked up by preflight
		}},
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// mainUsage is `orderpipe help`.
func mainUsage() string {
	var b strings.Builder
	b.WriteString("usage: orderpipe <command> [arguments]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\n`orderpipe <command> --help` prints a command's usage.\n" + configHint)
	return b.String()
}

// usageError is a command line that is not one: main prints it with the
// command's usage on stderr and exits 2.
type usageError struct {
	cmd string // "" for the command itself (unknown or missing)
	err error
}

func (e *usageError) Error() string {
	if e.cmd == "" {
		return "orderpipe: " + e.err.Error()
	}
	return "orderpipe " + e.cmd + ": " + e.err.Error()
}

// reportUsageError writes a usage error and the relevant usage.
func reportUsageError(w io.Writer, e *usageError) {
	if e.err != nil {
		fmt.Fprintln(w, e.Error())
	}
	if c, ok := lookupCommand(e.cmd); ok {
		c.writeUsage(w)
		return
	}
	fmt.Fprint(w, mainUsage())
}

// preflight handles what needs nothing but the arguments, before any
// configuration is read or any dependency touched: help (for every command,
// `--help`, `-h`, `help <command>`), version, env, and a command line that
// is wrong (unknown command or flag, stray argument), which is a
// *usageError. done is false for a valid command that should now run.
func preflight(args []string, stdout io.Writer) (done bool, err error) {
	if len(args) == 0 {
		return true, &usageError{err: errors.New("no command")}
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	c, ok := lookupCommand(name)
	if !ok {
		return false, nil // run refuses it
	}
	if err := c.check(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.writeUsage(stdout)
			return true, nil
		}
		return true, &usageError{cmd: c.name, err: err}
	}
	switch c.name {
	case "help":
		if len(args) > 1 {
			h, ok := lookupCommand(args[1])
			if !ok {
				return true, &usageError{cmd: "help", err: fmt.Errorf("unknown command %q", args[1])}
			}
			h.writeUsage(stdout)
		} else {
			fmt.Fprint(stdout, mainUsage())
		}
		return true, nil
	case "version":
		v := version.Get()
		fmt.Fprintf(stdout, "version   %s\ncommit    %s\nmodified  %t\ngo        %s\n", v.Version, v.Commit, v.Modified, v.GoVersion)
		return true, nil
	case "env":
		setting.Write(stdout, settings())
		return true, nil
	}
	return false, nil
}

// noArgs is the check of a command that takes no arguments.
func noArgs(args []string) error {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return setting.ParseFlagsOnly(fs, args)
}
