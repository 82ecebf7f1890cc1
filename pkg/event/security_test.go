package event_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/testenv"
)

func TestSecurityConfigChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  event.SecurityConfig
		want string // "" ⇒ valid; else part of the error
		str  string
	}{
		{"Plaintext", event.SecurityConfig{}, "", "PLAINTEXT"},
		{"TLS", event.SecurityConfig{TLS: true}, "", "SSL"},
		{"SASLSSL", event.SecurityConfig{TLS: true, Mechanism: "scram-sha-512", Username: "u", Password: "pw-secret-1"}, "", "SASL_SSL (SCRAM-SHA-512)"},
		{"SASLPlaintext", event.SecurityConfig{Mechanism: "PLAIN", Username: "u", Password: "pw-secret-1"}, "", "SASL_PLAINTEXT (PLAIN)"},
		{"UnknownMechanism", event.SecurityConfig{Mechanism: "GSSAPI", Username: "u", Password: "pw-secret-1"}, "want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", ""},
		{"MechanismWithoutUser", event.SecurityConfig{Mechanism: "PLAIN"}, "needs KAFKA_SASL_USERNAME", ""},
		{"UserWithoutMechanism", event.SecurityConfig{Username: "u", Password: "pw-secret-1"}, "need KAFKA_SASL_MECHANISM", ""},
		{"CAWithoutTLS", event.SecurityConfig{CAFile: "/x"}, "need KAFKA_TLS=true", ""},
		{"CertWithoutKey", event.SecurityConfig{TLS: true, CertFile: "/x"}, "go together", ""},
		{"MissingCA", event.SecurityConfig{TLS: true, CAFile: "/nonexistent/ca.pem"}, "KAFKA_TLS_CA_FILE", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.cfg.Load()
			testenv.MustConfigError(t, "Load", err, tc.want, "pw-secret-1")
			if tc.want == "" && s.String() != tc.str {
				t.Errorf("String() = %q, want %q", s.String(), tc.str)
			}
		})
	}
}

// TestSecurityOnARealBroker: every kafka-go client orderpipe builds — topic
// creation, the producer, a consumer group reader, the readiness ping —
// works over SASL_SSL with each mechanism and over mutual TLS, on a real
// Apache Kafka; and a wrong password, an unknown CA or a missing client
// certificate are refused.
func TestSecurityOnARealBroker(t *testing.T) {
	t.Parallel()
	certs := testenv.MustTLS(t, "orderpipe")
	plain := testenv.KafkaUser{Name: "alice", Password: "alice-Pw-2f6b"}
	scram := testenv.KafkaUser{Name: "carol", Password: "carol-Pw-9e4d"}
	k := testenv.MustSecureKafka(t, certs, plain, scram)
	for _, tc := range []struct {
		name   string
		broker string
		cfg    event.SecurityConfig
	}{
		{"SASLSSLPlain", k.SASLSSL, event.SecurityConfig{TLS: true, CAFile: certs.CA, Mechanism: "PLAIN", Username: plain.Name, Password: plain.Password}},
		{"SASLSSLScram256", k.SASLSSL, event.SecurityConfig{TLS: true, CAFile: certs.CA, Mechanism: "SCRAM-SHA-256", Username: scram.Name, Password: scram.Password}},
		{"SASLSSLScram512", k.SASLSSL, event.SecurityConfig{TLS: true, CAFile: certs.CA, Mechanism: "SCRAM-SHA-512", Username: scram.Name, Password: scram.Password}},
		{"MutualTLS", k.SSL, event.SecurityConfig{TLS: true, CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec, err := tc.cfg.Load()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			brokers := []string{tc.broker}
			if err := sec.Ping(ctx, brokers); err != nil {
				t.Fatalf("ping: %v", err)
			}
			topic := testenv.UniqueName("sec.")
			if err := sec.EnsureTopics(ctx, brokers, 2, 1, topic); err != nil {
				t.Fatalf("creating topic: %v", err)
			}
			w := event.NewWriter(event.WriterConfig{Brokers: brokers, Topic: topic, Security: sec})
			defer w.Close()
			if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("1:1"), Value: []byte("hello " + tc.name)}); err != nil {
				t.Fatalf("producing: %v", err)
			}
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: testenv.UniqueName("g."), Topic: topic,
				StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond, Dialer: sec.Dialer(10 * time.Second)})
			defer r.Close()
			m, err := r.FetchMessage(ctx)
			if err != nil {
				t.Fatalf("consuming in a group: %v", err)
			}
			if string(m.Value) != "hello "+tc.name {
				t.Errorf("consumed %q", m.Value)
			}
			if err := r.CommitMessages(ctx, m); err != nil {
				t.Errorf("committing: %v", err)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		broker string
		cfg    event.SecurityConfig
		want   string
	}{
		{"WrongPassword", k.SASLSSL, event.SecurityConfig{TLS: true, CAFile: certs.CA, Mechanism: "SCRAM-SHA-512", Username: scram.Name, Password: "x" + scram.Password}, "SASL"},
		{"WrongPlainPassword", k.SASLSSL, event.SecurityConfig{TLS: true, CAFile: certs.CA, Mechanism: "PLAIN", Username: plain.Name, Password: "x" + plain.Password}, "SASL"},
		{"OtherCA", k.SASLSSL, event.SecurityConfig{TLS: true, CAFile: certs.OtherCA, Mechanism: "PLAIN", Username: plain.Name, Password: plain.Password}, "unknown authority"},
		{"NoTLS", k.SASLSSL, event.SecurityConfig{Mechanism: "PLAIN", Username: plain.Name, Password: plain.Password}, ""},
		{"NoClientCertificate", k.SSL, event.SecurityConfig{TLS: true, CAFile: certs.CA}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec, err := tc.cfg.Load()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = sec.Ping(ctx, []string{tc.broker})
			if err == nil {
				t.Fatal("ping succeeded; want a refusal")
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("ping hung instead of being refused: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one with %q", err, tc.want)
			}
			for _, pw := range []string{plain.Password, scram.Password} {
				if strings.Contains(err.Error(), pw) {
					t.Errorf("the error shows a password: %v", err)
				}
			}
		})
	}
}
