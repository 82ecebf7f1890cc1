//go:build dev

package main

import (
	"context"
	"log/slog"
	"time"

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
func startStandins(ctx context.Context, log *slog.Logger, cfg *config) (stop func(), err error) {
	return standin.ForMissing(ctx, log, &cfg.Redis.Addr, &cfg.Database.URL)
}
