//go:build dev

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"orderpipe/bench"
	"orderpipe/pkg/clock"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/standin"
)

// The development build (-tags dev: make run, make build-dev) adds what the
// production build must not link (standin_prod.go): the embedded broker,
// stand-ins for a missing Redis and Postgres, and the stepped clock; their
// settings exist only here.

func devSettings() []setting.Var { return concat(standin.Settings, clock.Settings) }

// devConfig is what only the development build reads.
type devConfig struct {
	embedded  standin.Embedded
	clockFile string // DEV_CLOCK_OFFSET_FILE
}

func readDev(r *setting.Reader) devConfig {
	return devConfig{embedded: standin.ReadEmbedded(r), clockFile: r.String("DEV_CLOCK_OFFSET_FILE")}
}

// kafkaMain is `orderpipe kafka`.
var kafkaMain = standin.KafkaMain

// `orderpipe bench`, the load tool: it audits with the invariant checker,
// test tooling the production build does not link.
var (
	benchCheck = bench.CheckArgs
	benchUsage = bench.Usage
	benchMain  = bench.Main
)

// requireSigningKey: the development build (make run, the tests) signs with
// the public development key when EVENT_SIGNING_KEY is empty.
const requireSigningKey = false

// startBroker starts the embedded broker of `all` (standin.Embedded); dial
// reaches it through memory.
func startBroker(cfg config) (brokers []string, dial dialFunc, stop func(), err error) {
	e, k := cfg.dev.embedded, cfg.Kafka
	e.Partitions, e.Topic, e.DLQTopic, e.StatusTopic, e.Group = k.Partitions, k.Topic, k.DLQTopic, k.StatusTopic, cfg.Worker.Group
	b, err := e.Start()
	if err != nil {
		return nil, nil, nil, err
	}
	return b.Brokers, b.Dial, b.Close, nil
}

// limitMemory gives `all` its soft memory limit when it embeds the broker
// (KAFKA_EMBEDDED_MEMORY_LIMIT_MB); `orderpipe kafka` sets its own.
func limitMemory(command string, cfg config) {
	if command == "all" && len(cfg.Kafka.Brokers) == 0 {
		cfg.dev.embedded.LimitMemory()
	}
}

// watchClock applies the chaos suite's clock steps (DEV_CLOCK_OFFSET_FILE).
func watchClock(ctx context.Context, log *slog.Logger, cfg config) error {
	if cfg.dev.clockFile == "" {
		return nil
	}
	err := clock.Watch(ctx, cfg.dev.clockFile, 100*time.Millisecond, func(from, to time.Duration, err error) {
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
	return nil
}

// startStandins starts stand-ins for a Redis and a Postgres that are
// neither configured nor answering (standin.ForMissing).
// When one starts, their addresses are recorded (standin.WriteAddrs) for
// the commands run beside it (standinEnv).
func startStandins(ctx context.Context, log *slog.Logger, cfg *config) (stop func(), err error) {
	redisAddr, databaseURL := cfg.Redis.Addr, cfg.Database.URL
	stopStandins, err := standin.ForMissing(ctx, log, &cfg.Redis.Addr, &cfg.Database.URL)
	if err != nil || (cfg.Redis.Addr == redisAddr && cfg.Database.URL == databaseURL) {
		return stopStandins, err
	}
	a := standin.Addrs{PID: os.Getpid()}
	if cfg.Redis.Addr != redisAddr {
		a.RedisAddr = cfg.Redis.Addr
	}
	if cfg.Database.URL != databaseURL {
		a.DatabaseURL = cfg.Database.URL
	}
	remove, err := standin.WriteAddrs(a)
	if err != nil { // the pipeline runs; only the commands beside it miss the stand-ins
		log.Warn("the stand-ins' addresses could not be recorded: locate, events and dlq will not find them", "err", err)
	}
	return func() { remove(); stopStandins() }, nil
}

// standinEnv is env for a command run beside a `make run` that uses
// stand-ins (locate, events, dlq, reconciler): a variable the stand-ins
// replaced (REDIS_ADDR, DATABASE_URL), when unset here too, names the
// stand-in the running `orderpipe all` recorded, so those commands read the
// same data as the pipeline; a note on stderr says so.
func standinEnv(env setting.Env, stderr io.Writer) setting.Env {
	a, err := standin.ReadAddrs()
	if err != nil {
		return env
	}
	over := map[string]string{}
	if a.RedisAddr != "" && !setting.Set("REDIS_ADDR") && !setting.Set("REDIS_URL") {
		over["REDIS_ADDR"] = a.RedisAddr
	}
	if a.DatabaseURL != "" && !setting.Set("DATABASE_URL") {
		over["DATABASE_URL"] = a.DatabaseURL
	}
	if len(over) == 0 {
		return env
	}
	fmt.Fprintf(stderr, "orderpipe: using the stand-ins of the running orderpipe all (pid %d): %s\n", a.PID, strings.Join(slices.Sorted(maps.Keys(over)), ", "))
	return func(name string) string {
		if v, ok := over[name]; ok {
			return v
		}
		return env(name)
	}
}
