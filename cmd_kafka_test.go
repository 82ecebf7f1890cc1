//go:build dev

package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
)

// TestEmbeddedBrokerDataDirSurvivesRestart: with KAFKA_EMBEDDED_DIR the
// broker of `orderpipe kafka` reloads its messages and the consumer group's
// committed offsets, so a worker group resumes where it stopped instead of
// re-reading the topic. (The chaos suite kills it with SIGKILL instead.)
func TestEmbeddedBrokerDataDirSurvivesRestart(t *testing.T) {
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.KafkaPort, cfg.KafkaParts, cfg.KafkaDir = 0, 2, t.TempDir()
	cfg.KafkaTopic, cfg.KafkaDLQTopic = "orders.requested", "orders.requested.dlq"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	brokers, stop, err := startBroker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := event.NewWriter(event.WriterConfig{Brokers: brokers, Topic: cfg.KafkaTopic})
	for i := range 10 {
		if err := w.WriteMessages(ctx, kafka.Message{Key: fmt.Appendf(nil, "k%d", i%3), Value: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	seen := map[string]bool{}
	consume(ctx, t, brokers, cfg.KafkaTopic, 4, seen)
	stop()

	brokers, stop, err = startBroker(cfg) // same dir, another port
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	consume(ctx, t, brokers, cfg.KafkaTopic, 6, seen)
	if len(seen) != 10 {
		t.Errorf("after the restart the group read %d distinct messages of 10: it did not resume at its offsets", len(seen))
	}
	// Nothing is left: the group's offsets were all committed.
	r := groupReader(brokers, cfg.KafkaTopic)
	defer r.Close()
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	if m, err := r.FetchMessage(short); err == nil {
		t.Errorf("message %s redelivered after the restart", m.Value)
	}
}

func groupReader(brokers []string, topic string) *kafka.Reader {
	return kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "g", Topic: topic, StartOffset: kafka.FirstOffset,
		MaxWait: 50 * time.Millisecond, JoinGroupBackoff: 100 * time.Millisecond})
}

// consume reads n messages in group "g", committing each, and fails on one
// seen before.
func consume(ctx context.Context, t *testing.T, brokers []string, topic string, n int, seen map[string]bool) {
	t.Helper()
	r := groupReader(brokers, topic)
	defer r.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for range n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetching: %v", err)
		}
		if seen[string(m.Value)] {
			t.Errorf("message %s delivered twice", m.Value)
		}
		seen[string(m.Value)] = true
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}
