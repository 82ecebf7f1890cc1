//go:build dev

package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"orderpipe/pkg/event"
	"orderpipe/pkg/standin"
)

// runKafka is `orderpipe kafka`: the embedded broker alone, so the components
// can run as separate processes against a broker that can be stopped, killed
// and restarted (the chaos suite does). With KAFKA_EMBEDDED_DIR the broker
// keeps its log on disk, synced before each produce is acknowledged, so a kill
// loses no acknowledged message and a restart resumes the topics and the
// consumer groups' committed offsets.
func runKafka(ctx context.Context, log *slog.Logger, cfg config) error {
	brokers, stop, err := startBroker(cfg)
	if err != nil {
		return fmt.Errorf("%w (set KAFKA_EMBEDDED_PORT to another port)", err)
	}
	defer stop()
	// A data dir from an earlier run is reloaded as it was: topics it lacks
	// (another KAFKA_TOPIC) are created here, not by the seed.
	if err := event.EnsureTopics(ctx, brokers, cfg.KafkaParts, 1, cfg.KafkaTopic, cfg.KafkaDLQTopic); err != nil {
		return err
	}
	dir := cfg.KafkaDir
	if dir == "" {
		dir = "(in memory)"
	}
	log.Info("kafka broker listening", "brokers", strings.Join(brokers, ","), "data_dir", dir,
		"topics", []string{cfg.KafkaTopic, cfg.KafkaDLQTopic}, "retention_mib", cfg.KafkaRetainMB, "dlq_retention_mib", cfg.KafkaDLQMB,
		"guarded_by_group", cfg.KafkaGroup)
	<-ctx.Done()
	log.Info("kafka broker stopping")
	return nil
}

// retentionInterval is how often the embedded broker deletes what its
// retention allows: at the ~10k events/s this machine's pipeline takes, a
// second adds a few MiB.
const retentionInterval = time.Second

// startBroker starts the embedded kfake broker of `all` and `kafka` on
// KAFKA_EMBEDDED_PORT, persistent when KAFKA_EMBEDDED_DIR is set. It keeps
// what the worker group has not committed, and beyond that about
// KAFKA_EMBEDDED_RETENTION_MB of the order topic and
// KAFKA_EMBEDDED_DLQ_RETENTION_MB of dead letters (standin.Retention), so a
// long `make run` stays bounded.
func startBroker(cfg config) (brokers []string, stop func(), err error) {
	k, err := standin.StartKafka(standin.KafkaOptions{Port: cfg.KafkaPort, Partitions: cfg.KafkaParts,
		Topics: []string{cfg.KafkaTopic, cfg.KafkaDLQTopic, cfg.KafkaStatusTopic}, Dir: cfg.KafkaDir, AdvertisedPort: cfg.KafkaAdvPort,
		Retention: standin.Retention{Interval: retentionInterval,
			// orders.status is kept like the dead letters: its newest
			// KAFKA_EMBEDDED_DLQ_RETENTION_MB (no group guards it).
			Bytes: map[string]int64{cfg.KafkaTopic: int64(cfg.KafkaRetainMB) << 20, cfg.KafkaDLQTopic: int64(cfg.KafkaDLQMB) << 20,
				cfg.KafkaStatusTopic: int64(cfg.KafkaDLQMB) << 20},
			Guard: map[string]string{cfg.KafkaTopic: cfg.KafkaGroup}},
		RetentionErrFunc: func(err error) { slog.Warn("embedded broker: deleting old records", "err", err) },
		GhostFunc: func(reaped []string, err error) {
			if len(reaped) > 0 {
				slog.Warn("embedded broker: removed group members silent past their session timeout", "members", reaped)
			}
			if err != nil {
				slog.Warn("embedded broker: removing silent group members", "err", err)
			}
		}})
	if err != nil {
		return nil, nil, err
	}
	return k.Brokers, k.Close, nil
}
