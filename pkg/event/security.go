package event

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	saslplain "github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// SecurityConfig is how to reach the brokers as configured (KAFKA_TLS,
// KAFKA_TLS_*_FILE, KAFKA_SASL_*); Load turns it into a Security.
type SecurityConfig struct {
	// TLS encrypts every connection and verifies the brokers' certificates
	// against CAFile (else the system's roots) and the host name dialed.
	TLS bool
	// CertFile and KeyFile are a client certificate (mutual TLS, ssl.client.auth=required).
	CAFile, CertFile, KeyFile string
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty ⇒ no SASL.
	Mechanism          string
	Username, Password string
}

// Mechanisms are the SASL mechanisms orderpipe speaks.
var Mechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// Security is what every kafka-go dialer, transport and client of the
// process is built with (Dialer, Transport): one place, so the producer, the
// consumer group, the redrive, the DLQ writer, topic creation, the readiness
// ping and the lag reader all connect alike. The zero value is plaintext
// without SASL (the embedded broker, tests).
type Security struct {
	TLS  *tls.Config
	SASL sasl.Mechanism
	// Dial, when set, makes every connection (`orderpipe all` sets the
	// embedded broker's, which reaches it through memory); nil ⇒ TCP.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Load checks the configuration and reads the certificate files. Errors
// name the variable and never quote the password.
func (c SecurityConfig) Load() (Security, error) {
	var s Security
	if !c.TLS && (c.CAFile != "" || c.CertFile != "" || c.KeyFile != "") {
		return s, errors.New("KAFKA_TLS_CA_FILE, KAFKA_TLS_CERT_FILE and KAFKA_TLS_KEY_FILE need KAFKA_TLS=true")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return s, errors.New("KAFKA_TLS_CERT_FILE and KAFKA_TLS_KEY_FILE go together: set both or neither")
	}
	if c.TLS {
		// ServerName stays empty: kafka-go sets it to the host of each
		// broker it dials, so every broker is verified against its own
		// advertised name.
		s.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return s, fmt.Errorf("KAFKA_TLS_CA_FILE: %w", err)
			}
			s.TLS.RootCAs = x509.NewCertPool()
			if !s.TLS.RootCAs.AppendCertsFromPEM(pem) {
				return s, fmt.Errorf("KAFKA_TLS_CA_FILE %s: no PEM certificate in it", c.CAFile)
			}
		}
		if c.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return s, fmt.Errorf("KAFKA_TLS_CERT_FILE/KAFKA_TLS_KEY_FILE: %w", err)
			}
			s.TLS.Certificates = []tls.Certificate{cert}
		}
	}
	if c.Mechanism == "" {
		if c.Username != "" || c.Password != "" {
			return s, fmt.Errorf("KAFKA_SASL_USERNAME/KAFKA_SASL_PASSWORD need KAFKA_SASL_MECHANISM (%s)", strings.Join(Mechanisms, ", "))
		}
		return s, nil
	}
	if c.Username == "" || c.Password == "" {
		return s, errors.New("KAFKA_SASL_MECHANISM needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD")
	}
	var err error
	switch strings.ToUpper(c.Mechanism) {
	case "PLAIN":
		s.SASL = saslplain.Mechanism{Username: c.Username, Password: c.Password}
	case "SCRAM-SHA-256":
		s.SASL, err = scram.Mechanism(scram.SHA256, c.Username, c.Password)
	case "SCRAM-SHA-512":
		s.SASL, err = scram.Mechanism(scram.SHA512, c.Username, c.Password)
	default:
		return s, fmt.Errorf("KAFKA_SASL_MECHANISM %q: want one of %s", c.Mechanism, strings.Join(Mechanisms, ", "))
	}
	if err != nil {
		// The SCRAM library's errors are about the username (SASLprep).
		return s, fmt.Errorf("KAFKA_SASL_USERNAME/KAFKA_SASL_PASSWORD: not valid for %s", c.Mechanism)
	}
	return s, nil
}

// String says how connections are made, for logs: "plaintext", "TLS",
// "SASL_SSL (SCRAM-SHA-512)".
func (s Security) String() string {
	switch {
	case s.TLS != nil && s.SASL != nil:
		return "SASL_SSL (" + s.SASL.Name() + ")"
	case s.TLS != nil:
		return "SSL"
	case s.SASL != nil:
		return "SASL_PLAINTEXT (" + s.SASL.Name() + ")"
	}
	return "PLAINTEXT"
}

// Dialer is a connection dialer (the consumer group reader, Ping).
func (s Security) Dialer(timeout time.Duration) *kafka.Dialer {
	return &kafka.Dialer{Timeout: timeout, DualStack: true, TLS: s.TLS, SASLMechanism: s.SASL, DialFunc: s.Dial}
}

// Transport is a pooled transport (writers, clients); the TLS handshake
// and SASL authentication follow each TCP dial.
func (s Security) Transport(dialTimeout time.Duration) *kafka.Transport {
	return &kafka.Transport{DialTimeout: dialTimeout, TLS: s.TLS, SASL: s.SASL, Dial: s.Dial}
}

// EnsureTopics creates the topics that do not exist yet, with partitions
// partitions of replication copies each (replication <= 0: the broker's
// default.replication.factor). An existing topic is left as it is.
func (s Security) EnsureTopics(ctx context.Context, brokers []string, partitions, replication int, topics ...string) error {
	tr := s.Transport(5 * time.Second)
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: tr}
	req := &kafka.CreateTopicsRequest{}
	if replication <= 0 {
		replication = -1
	}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: replication})
	}
	res, err := client.CreateTopics(ctx, req)
	if err != nil {
		// The pooled transport reports a failed TLS handshake or SASL
		// login as "Broker Not Available"; a direct connection says why.
		if perr := s.Ping(ctx, brokers); perr != nil {
			return fmt.Errorf("creating topics: %w", perr)
		}
		return fmt.Errorf("creating topics: %w", err)
	}
	for topic, err := range res.Errors {
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", topic, err)
		}
	}
	return s.waitLeaders(ctx, client, topics)
}

// waitLeaders waits until every broker names a leader for every partition
// of the topics, the same one. On a real cluster CreateTopics answers
// before the controller has elected them: a writer that reads the metadata
// in between sees fewer partitions (kafka-go balances over what it sees, so
// every key lands on one) or fails with LEADER_NOT_AVAILABLE, and a broker
// whose metadata lags sends a client to no leader or an old one. Bounded by
// ctx and 30 s.
func (s Security) waitLeaders(ctx context.Context, client *kafka.Client, topics []string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
		if err == nil {
			if !allLed(md, len(topics)) {
				err = errors.New("a partition has no leader yet")
			} else if err = s.brokersAgree(ctx, md, topics); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the leaders of %v: %w", topics, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// brokersAgree asks every broker in md, on a connection of its own (a
// pooled client may send a metadata request to any broker), for the
// topics' partitions: each must know them all and name the same leaders
// (a reader or writer may ask any of them).
func (s Security) brokersAgree(ctx context.Context, md *kafka.MetadataResponse, topics []string) error {
	want := leaders(md)
	d := s.Dialer(5 * time.Second)
	for _, b := range md.Brokers {
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(b.Host, strconv.Itoa(b.Port)))
		if err != nil {
			return fmt.Errorf("reaching broker %d: %w", b.ID, err)
		}
		parts, err := conn.ReadPartitions(topics...)
		conn.Close()
		if err != nil {
			return fmt.Errorf("metadata from broker %d: %w", b.ID, err)
		}
		got := map[string]int{}
		for _, p := range parts {
			got[p.Topic+"/"+strconv.Itoa(p.ID)] = p.Leader.ID
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("broker %d does not name the same leaders yet", b.ID)
		}
	}
	return nil
}

// leaders maps topic/partition to the leader's node id.
func leaders(md *kafka.MetadataResponse) map[string]int {
	out := map[string]int{}
	for _, t := range md.Topics {
		for _, p := range t.Partitions {
			out[t.Name+"/"+strconv.Itoa(p.ID)] = p.Leader.ID
		}
	}
	return out
}

func allLed(md *kafka.MetadataResponse, topics int) bool {
	if len(md.Topics) != topics {
		return false
	}
	for _, t := range md.Topics {
		if t.Error != nil || len(t.Partitions) == 0 {
			return false
		}
		for _, p := range t.Partitions {
			if p.Error != nil || p.Leader.Host == "" {
				return false
			}
		}
	}
	return true
}

// Ping checks that some broker accepts a fresh connection (TLS handshake
// and SASL authentication included) and answers a metadata request (a
// cached client would hide a dead cluster). ctx bounds the answer as well as
// the dial (at most 10 s a broker): a broker that accepts and never answers
// costs a ping its time, never the caller's.
func (s Security) Ping(ctx context.Context, brokers []string) error {
	d := s.Dialer(10 * time.Second)
	var errs []error
	for _, b := range brokers {
		conn, err := d.DialContext(ctx, "tcp", b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		// A closed conn fails the read below, so the errors can be dropped.
		_ = conn.SetDeadline(deadline)
		stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
		_, err = conn.Brokers()
		stop()
		conn.Close()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("reaching kafka: %w", errors.Join(errs...))
}
