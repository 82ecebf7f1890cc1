package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"

	"orderpipe/pkg/event"
)

// runKafka is `orderpipe kafka`: the embedded broker alone, so the components
// can run as separate processes against a broker that can be stopped, killed
// and restarted (the chaos suite does). With KAFKA_EMBEDDED_DIR the broker
// keeps its log on disk, synced before each produce is acknowledged, so a kill
// loses no acknowledged message and a restart resumes the topics and the
// consumer groups' committed offsets.
func runKafka(ctx context.Context, log *slog.Logger, cfg config) error {
	emb, err := startBroker(cfg)
	if err != nil {
		return fmt.Errorf("%w (set KAFKA_EMBEDDED_PORT to another port)", err)
	}
	defer emb.Close()
	// A data dir from an earlier run is reloaded as it was: topics it lacks
	// (another KAFKA_TOPIC) are created here, not by the seed.
	if err := event.EnsureTopics(ctx, emb.Brokers, cfg.KafkaParts, 1, cfg.KafkaTopic, cfg.KafkaDLQTopic); err != nil {
		return err
	}
	dir := cfg.KafkaDir
	if dir == "" {
		dir = "(in memory)"
	}
	log.Info("kafka broker listening", "brokers", strings.Join(emb.Brokers, ","), "data_dir", dir,
		"topics", []string{cfg.KafkaTopic, cfg.KafkaDLQTopic})
	<-ctx.Done()
	log.Info("kafka broker stopping")
	return nil
}

// startBroker starts the embedded kfake broker of `all` and `kafka` on
// KAFKA_EMBEDDED_PORT, persistent when KAFKA_EMBEDDED_DIR is set.
func startBroker(cfg config) (*event.Embedded, error) {
	if cfg.KafkaDir == "" {
		return event.StartEmbedded(cfg.KafkaPort, cfg.KafkaParts, cfg.KafkaTopic, cfg.KafkaDLQTopic)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
		kfake.SeedTopics(int32(cfg.KafkaParts), cfg.KafkaTopic, cfg.KafkaDLQTopic),
		// Every produce (and offset commit) is fsynced before it is
		// acknowledged: the gateway answers 202 only after the ack.
		kfake.DataDir(cfg.KafkaDir), kfake.SyncWrites()}
	if cfg.KafkaPort > 0 {
		opts = append(opts, kfake.Ports(cfg.KafkaPort))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting embedded kafka in %s: %w", cfg.KafkaDir, err)
	}
	return &event.Embedded{Cluster: c, Brokers: c.ListenAddrs()}, nil
}
