package event

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/setting"
)

// Settings are the environment variables of the Kafka clients: where the
// cluster is, its topics, how a client reaches it.
var Settings = []setting.Var{
	{Name: "KAFKA_BROKERS", Default: "", Help: "comma-separated brokers; empty ⇒ `all` starts an embedded broker"},
	{Name: "KAFKA_TOPIC", Default: Topic, Help: "topic of order events"},
	{Name: "KAFKA_DLQ_TOPIC", Default: DLQTopic, Help: "dead-letter topic"},
	{Name: "KAFKA_STATUS_TOPIC", Default: StatusTopic, Help: "topic of orders.status, one event per state change of an order (key orderNo), published by the relay"},
	{Name: "KAFKA_PARTITIONS", Default: "8", Help: "partitions when orderpipe creates the topics"},
	{Name: "KAFKA_REPLICATION_FACTOR", Default: "1", Help: "replicas per partition when orderpipe creates the topics (3 on a 3-broker cluster; with min.insync.replicas=2 an acknowledged event survives one broker's loss)"},
	{Name: "KAFKA_BATCH_TIMEOUT", Default: "2ms", Help: "linger of kafka-go's Writer before a batch is sent: the worker's dead-letter and redrive producers, and the gateway's with GATEWAY_PRODUCER=writer"},
	{Name: "KAFKA_TLS", Default: "false", Help: "true ⇒ TLS to every broker, verified against KAFKA_TLS_CA_FILE (else the system's roots) and the broker's host name"},
	{Name: "KAFKA_TLS_CA_FILE", Default: "", Help: "PEM CA certificate(s) that verify the brokers (with KAFKA_TLS=true)"},
	{Name: "KAFKA_TLS_CERT_FILE", Default: "", Help: "PEM client certificate for mutual TLS with the brokers (with KAFKA_TLS_KEY_FILE)"},
	{Name: "KAFKA_TLS_KEY_FILE", Default: "", Help: "PEM private key of KAFKA_TLS_CERT_FILE"},
	{Name: "KAFKA_SASL_MECHANISM", Default: "", Help: "SASL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with KAFKA_TLS=true: SASL_SSL); empty ⇒ no SASL"},
	{Name: "KAFKA_SASL_USERNAME", Default: "", Help: "SASL user"},
	{Name: "KAFKA_SASL_PASSWORD", Default: "", Help: "SASL password (usually KAFKA_SASL_PASSWORD_FILE)"},
	{Name: "EVENT_SIGNING_KEY", Default: "", Help: "secret key of the HMAC-SHA256 each orders.requested event carries (header signature), set by the gateway and the redrive and checked by the worker and dlq replay; the same on all of them (usually EVENT_SIGNING_KEY_FILE). A message without a valid signature is not the gateway's: dead-lettered, it changes nothing. Empty ⇒ a public development key in the development build (make run); the production build refuses to start a gateway or worker without one"},
}

// ReadSecurity is the TLS and SASL the settings describe, loaded (a
// certificate that cannot be read is a failure of r).
func ReadSecurity(r *setting.Reader) Security {
	sec, err := SecurityConfig{TLS: r.Bool("KAFKA_TLS"), CAFile: r.String("KAFKA_TLS_CA_FILE"), CertFile: r.String("KAFKA_TLS_CERT_FILE"),
		KeyFile: r.String("KAFKA_TLS_KEY_FILE"), Mechanism: r.String("KAFKA_SASL_MECHANISM"), Username: r.String("KAFKA_SASL_USERNAME"),
		Password: r.String("KAFKA_SASL_PASSWORD")}.Load()
	if err != nil {
		r.Fail("%s", err.Error())
	}
	return sec
}

// Config is where the cluster is, the pipeline's topics on it and how a
// client reaches it.
type Config struct {
	Brokers                      []string // KAFKA_BROKERS
	Topic, DLQTopic, StatusTopic string   // KAFKA_TOPIC, KAFKA_DLQ_TOPIC, KAFKA_STATUS_TOPIC
	// Partitions and ReplicationFactor are those of the topics orderpipe
	// creates (KAFKA_PARTITIONS, KAFKA_REPLICATION_FACTOR).
	Partitions, ReplicationFactor int
	BatchTimeout                  time.Duration // KAFKA_BATCH_TIMEOUT, the linger of a Writer
	Security                      Security      // KAFKA_TLS*, KAFKA_SASL_*
	SigningKey                    string        // EVENT_SIGNING_KEY ("": DevelopmentSigningKey); SetSigningKey applies it
}

// Read is the Config the settings describe.
func Read(r *setting.Reader) Config {
	c := Config{Brokers: r.List("KAFKA_BROKERS"), Topic: r.String("KAFKA_TOPIC"), DLQTopic: r.String("KAFKA_DLQ_TOPIC"),
		StatusTopic: r.String("KAFKA_STATUS_TOPIC"), Partitions: r.Int("KAFKA_PARTITIONS"), ReplicationFactor: r.Int("KAFKA_REPLICATION_FACTOR"),
		BatchTimeout: r.Duration("KAFKA_BATCH_TIMEOUT"), Security: ReadSecurity(r), SigningKey: r.String("EVENT_SIGNING_KEY")}
	if c.Partitions == 0 {
		r.Fail("KAFKA_PARTITIONS: want at least 1")
	}
	if c.ReplicationFactor < 1 {
		r.Fail("KAFKA_REPLICATION_FACTOR: want at least 1")
	}
	return c
}

// Writer is a Writer (NewWriter) of topic on the cluster.
func (c Config) Writer(topic string) *kafka.Writer {
	return NewWriter(WriterConfig{Brokers: c.Brokers, Topic: topic, BatchTimeout: c.BatchTimeout, Security: c.Security})
}

// EnsureTopics creates the order, dead-letter and status topics if missing.
func (c Config) EnsureTopics(ctx context.Context) error {
	return c.Security.EnsureTopics(ctx, c.Brokers, c.Partitions, c.ReplicationFactor, c.Topic, c.DLQTopic, c.StatusTopic)
}

// CreateTopics is `orderpipe topics`: EnsureTopics on a real cluster.
func (c Config) CreateTopics(ctx context.Context, log *slog.Logger) error {
	if len(c.Brokers) == 0 {
		return errors.New("KAFKA_BROKERS is empty: topics are created on a real cluster (the embedded broker creates its own)")
	}
	if err := c.EnsureTopics(ctx); err != nil {
		return err
	}
	log.Info("topics ready", "topics", []string{c.Topic, c.DLQTopic, c.StatusTopic}, "partitions", c.Partitions,
		"replication_factor", c.ReplicationFactor)
	return nil
}

// TopicsUsage is `orderpipe topics --help`.
const TopicsUsage = `usage: orderpipe topics

Creates KAFKA_TOPIC, KAFKA_DLQ_TOPIC and KAFKA_STATUS_TOPIC on KAFKA_BROKERS if they are missing,
with KAFKA_PARTITIONS partitions and KAFKA_REPLICATION_FACTOR replicas each;
existing topics are left as they are. A broker that does not answer yet
(starting, or briefly unreachable) is waited for up to 30 s; a refused login
or certificate ends it at once.
`
