package event

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"
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
	// Security is TLS and SASL (zero: plaintext).
	Security Security
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
		Transport:       transport(c.Security),
		// Tells the recording send spans where their message landed.
		Completion: sent.complete,
	}
}

// transport is a writer's: a second to connect, metadata refreshed every 2 s.
func transport(s Security) *kafka.Transport {
	tr := s.Transport(time.Second)
	// kafka-go refreshes a writer's view of the partition leaders only when
	// this expires, not when a produce fails: on a real cluster a gateway
	// kept dialling a dead leader for up to 10 s after the controller had
	// moved leadership (make chaos-kafka). 2 s bounds that; a metadata
	// request every 2 s per gateway is cheap.
	tr.MetadataTTL = 2 * time.Second
	return tr
}

// EnsureTopics is Security.EnsureTopics in plaintext without SASL (the
// embedded broker, tests).
func EnsureTopics(ctx context.Context, brokers []string, partitions, replication int, topics ...string) error {
	return Security{}.EnsureTopics(ctx, brokers, partitions, replication, topics...)
}

// Ping is Security.Ping in plaintext without SASL.
func Ping(ctx context.Context, brokers []string) error {
	return Security{}.Ping(ctx, brokers)
}
