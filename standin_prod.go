//go:build !dev

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"orderpipe/pkg/clock"
	"orderpipe/pkg/setting"
)

// The production build links no test fake: no embedded Kafka broker (kfake),
// no miniredis, no embedded-postgres, and has no stepped clock. `make run`
// and `make build-dev` build with -tags dev, which brings them in
// (standin.go), with their settings.

func devSettings() []setting.Var { return nil }

// requireSigningKey: a production gateway or worker refuses to start with
// EVENT_SIGNING_KEY empty (the development build signs with a public key).
const requireSigningKey = true

type devConfig struct{}

func readDev(*setting.Reader) devConfig { return devConfig{} }

// startStandins starts nothing: a production process uses the servers it is
// configured with, and says so when they do not answer.
func startStandins(context.Context, *slog.Logger, *config) (stop func(), err error) {
	return func() {}, nil
}

// standinEnv is env: a production process has no stand-ins to find.
func standinEnv(env setting.Env, _ io.Writer) setting.Env { return env }

// limitMemory sets nothing: without the embedded broker the runtime's
// GOMEMLIMIT is the only limit.
func limitMemory(string, config) {}

func startBroker(config) (brokers []string, dial dialFunc, stop func(), err error) {
	return nil, nil, nil, errNoEmbedded
}

// errNoBench: the load tool is test tooling (it audits with the invariant
// checker).
var errNoBench = errors.New("orderpipe bench, the load tool, is only in development builds (make build-dev: bin/orderpipe-dev bench); the production build links no test tooling")

// benchCheck refuses every command line but a request for help, naming
// what it was given, before anything is touched.
func benchCheck(args []string) error {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return flag.ErrHelp
		}
	}
	if len(args) > 0 {
		return fmt.Errorf("%s: %w", strings.Join(args, " "), errNoBench)
	}
	return nil
}

func benchUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: orderpipe bench ...\n\n%s.\n", errNoBench)
}

func benchMain(_ context.Context, _ []string, _ setting.Env, _, stderr io.Writer) int {
	fmt.Fprintf(stderr, "orderpipe: %v\n", errNoBench)
	return 2
}

func kafkaMain(context.Context, []string, setting.Env, io.Writer, io.Writer) int {
	slog.Error("orderpipe failed", "err", errNoEmbedded)
	return 1
}

// watchClock refuses DEV_CLOCK_OFFSET_FILE, which this build does not
// declare, rather than ignore it (clock.Watch says why).
func watchClock(ctx context.Context, _ *slog.Logger, _ config) error {
	if !setting.Set("DEV_CLOCK_OFFSET_FILE") {
		return nil
	}
	return clock.Watch(ctx, "", 100*time.Millisecond, nil)
}
