package standin

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
)

// KafkaOptions configure the embedded broker.
type KafkaOptions struct {
	// Port on 127.0.0.1; 0 picks a free one.
	Port int
	// Partitions of each seeded topic.
	Partitions int
	// Topics to create at start.
	Topics []string
	// Dir, when set, keeps the broker's log on disk: every acknowledged
	// produce (and offset commit) is fsynced first, so a kill loses no
	// acknowledged message and a restart on the same Dir resumes the topics
	// and the consumer groups' committed offsets. Empty ⇒ in memory.
	Dir string
}

// Kafka is a running in-process Kafka-protocol broker (kfake): the embedded
// broker of `orderpipe all` and `orderpipe kafka` in development builds.
type Kafka struct {
	Cluster *kfake.Cluster
	// Brokers is the bootstrap list, for KAFKA_BROKERS.
	Brokers []string
}

// StartKafka starts one kfake broker that creates topics on first use.
func StartKafka(o KafkaOptions) (*Kafka, error) {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation()}
	if o.Port > 0 {
		opts = append(opts, kfake.Ports(o.Port))
	}
	if len(o.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(o.Partitions), o.Topics...))
	}
	where := "in memory"
	if o.Dir != "" {
		// The gateway answers 202 only after the ack, so the ack must mean
		// the message is on disk.
		opts = append(opts, kfake.DataDir(o.Dir), kfake.SyncWrites())
		where = "in " + o.Dir
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting embedded kafka %s: %w", where, err)
	}
	return &Kafka{Cluster: c, Brokers: c.ListenAddrs()}, nil
}

// Close stops the broker; without Dir its data is gone.
func (k *Kafka) Close() { k.Cluster.Close() }
