package event

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// WriterConfig tunes a producer.
type WriterConfig struct {
	Brokers []string
	Topic   string
	// BatchTimeout bounds how long a message waits for companions before the
	// batch is sent; kafka-go's default (1 s) would be the latency floor of
	// every order, so it is set deliberately.
	BatchTimeout time.Duration
	// WriteTimeout bounds one produce request.
	WriteTimeout time.Duration
	// MaxAttempts is how often a batch is tried before the write fails.
	MaxAttempts int
}

// NewWriter returns a synchronous writer that waits for all in-sync replicas
// and keys messages to partitions by hash, so one item stays in one partition.
func NewWriter(c WriterConfig) *kafka.Writer {
	if c.BatchTimeout <= 0 {
		c.BatchTimeout = 2 * time.Millisecond
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 2 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	return &kafka.Writer{
		Addr:            kafka.TCP(c.Brokers...),
		Topic:           c.Topic,
		Balancer:        &kafka.Hash{},
		RequiredAcks:    kafka.RequireAll,
		BatchTimeout:    c.BatchTimeout,
		BatchSize:       500,
		WriteTimeout:    c.WriteTimeout,
		ReadTimeout:     c.WriteTimeout,
		MaxAttempts:     c.MaxAttempts,
		WriteBackoffMin: 20 * time.Millisecond,
		WriteBackoffMax: 200 * time.Millisecond,
		Transport: &kafka.Transport{
			Dial:        (&net.Dialer{Timeout: time.Second}).DialContext,
			MetadataTTL: 10 * time.Second,
		},
		// Tells the recording send spans where their message landed.
		Completion: sent.complete,
	}
}

// EnsureTopics creates the topics that do not exist yet, with partitions
// partitions of replication copies each (replication <= 0: the broker's
// default.replication.factor). An existing topic is left as it is.
func EnsureTopics(ctx context.Context, brokers []string, partitions, replication int, topics ...string) error {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	req := &kafka.CreateTopicsRequest{}
	if replication <= 0 {
		replication = -1
	}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: replication})
	}
	res, err := client.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("creating topics: %w", err)
	}
	for topic, err := range res.Errors {
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", topic, err)
		}
	}
	return nil
}

// Ping checks that some broker accepts a fresh connection and answers a
// metadata request (a cached client would hide a dead cluster).
func Ping(ctx context.Context, brokers []string) error {
	var errs []error
	for _, b := range brokers {
		conn, err := kafka.DialContext(ctx, "tcp", b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, err = conn.Brokers()
		conn.Close()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("reaching kafka: %w", errors.Join(errs...))
}

// Embedded is an in-process Kafka-protocol broker for the local default.
type Embedded struct {
	Cluster *kfake.Cluster
	Brokers []string
}

// StartEmbedded starts a kfake broker on addr ("" for a random port) with
// the given topics.
func StartEmbedded(port int, partitions int, topics ...string) (*Embedded, error) {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation()}
	if port > 0 {
		opts = append(opts, kfake.Ports(port))
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting embedded kafka: %w", err)
	}
	return &Embedded{Cluster: c, Brokers: c.ListenAddrs()}, nil
}

// Close stops the broker.
func (e *Embedded) Close() { e.Cluster.Close() }
