//go:build dev

package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

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
		"topics", []string{cfg.KafkaTopic, cfg.KafkaDLQTopic})
	<-ctx.Done()
	log.Info("kafka broker stopping")
	return nil
}

// startBroker starts the embedded kfake broker of `all` and `kafka` on
// KAFKA_EMBEDDED_PORT, persistent when KAFKA_EMBEDDED_DIR is set.
func startBroker(cfg config) (brokers []string, stop func(), err error) {
	k, err := standin.StartKafka(standin.KafkaOptions{Port: cfg.KafkaPort, Partitions: cfg.KafkaParts,
		Topics: []string{cfg.KafkaTopic, cfg.KafkaDLQTopic}, Dir: cfg.KafkaDir})
	if err != nil {
		return nil, nil, err
	}
	return k.Brokers, k.Close, nil
}
