package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
	"orderpipe/worker"
)

// testBinaryReachesRedisOverTLS: the commands build their Redis client from
// REDIS_URL (rediss://, an ACL user), REDIS_PASSWORD_FILE and the
// REDIS_TLS_* files: the production binary's reconciler and locate reach a
// redis-server that requires mutual TLS, and fail without the client
// certificate.
func testBinaryReachesRedisOverTLS(t *testing.T, _ engine) {
	t.Parallel()
	certs := testenv.MustTLS(t, "orderpipe")
	const alicePassword = "alice-Pw-0c3b"
	srv := testenv.MustRedisTLS(t, certs, "--requirepass", "default-Pw-5e2a", "--user", "alice", "on", ">"+alicePassword, "~*", "&*", "+@all")
	db := testenv.MustDatabase(t)
	pwFile := filepath.Join(t.TempDir(), "redis_password")
	if err := os.WriteFile(pwFile, []byte(alicePassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"DATABASE_URL=" + db.URL, "REDIS_URL=rediss://alice@" + srv.TLSAddr, "REDIS_PASSWORD_FILE=" + pwFile,
		"REDIS_TLS_CA_FILE=" + certs.CA, "REDIS_TLS_CERT_FILE=" + certs.ClientCert, "REDIS_TLS_KEY_FILE=" + certs.ClientKey,
		"REDIS_KEY_PREFIX=" + testenv.UniqueName("t") + ":"}

	res := runBinary(t, env, "reconciler", "--once")
	if res.code != 0 {
		t.Errorf("reconciler --once over TLS: want exit 0 (clean): %s", res)
	}
	res = runBinary(t, env, "locate", "tls-unknown-request")
	if res.code != 1 || !strings.Contains(res.stdout, "UNKNOWN") {
		t.Errorf("locate over TLS: want exit 1 (looked everywhere, found nothing): %s", res)
	}

	noCert := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "REDIS_TLS_CERT_FILE=") || strings.HasPrefix(kv, "REDIS_TLS_KEY_FILE=")
	})
	res = runBinary(t, noCert, "reconciler", "--once")
	if res.code != 2 || !strings.Contains(res.stderr, "reaching redis at rediss://alice:xxxxx@"+srv.TLSAddr) {
		t.Errorf("reconciler --once without the client certificate: want exit 2, naming where (password masked): %s", res)
	}
	if strings.Contains(res.String(), alicePassword) {
		t.Errorf("the password is shown: %s", res)
	}
}

// testBinaryReachesPostgresOverTLS: DATABASE_URL's sslmode=verify-full with
// sslrootcert reaches a PostgreSQL that takes only TLS connections with a
// password (migrate creates the database through the maintenance database,
// over TLS too, then the reconciler runs on it); verify-full refuses another
// CA and a host the certificate does not name, which verify-ca accepts.
func testBinaryReachesPostgresOverTLS(t *testing.T, _ engine) {
	t.Parallel()
	certs := testenv.MustTLS(t, "orderpipe")
	const pw = "pgTls-Pw-8f1d"
	pg := testenv.MustPostgresTLS(t, certs, pw)
	redisEnv := []string{"REDIS_ADDR=" + testenv.RedisAddr(), "REDIS_KEY_PREFIX=" + testenv.UniqueName("t") + ":"}
	verify := func(mode, ca string) string { return "sslmode=" + mode + "&sslrootcert=" + url.QueryEscape(ca) }
	urlFile := filepath.Join(t.TempDir(), "database_url")
	if err := os.WriteFile(urlFile, []byte(pg.URL("localhost", "orderpipe_tls", verify("verify-full", certs.CA))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  string
		want string // "" ⇒ success; else a part of the error
	}{
		{"VerifyFullByName", "DATABASE_URL_FILE=" + urlFile, ""},
		{"VerifyFullByIP", "DATABASE_URL=" + pg.URL("127.0.0.1", "orderpipe_tls", verify("verify-full", certs.CA)), ""},
		{"VerifyCAOtherName", "DATABASE_URL=" + pg.URL("127.0.0.2", "orderpipe_tls", verify("verify-ca", certs.CA)), ""},
		{"VerifyFullOtherName", "DATABASE_URL=" + pg.URL("127.0.0.2", "orderpipe_tls", verify("verify-full", certs.CA)), "127.0.0.2"},
		{"VerifyFullOtherCA", "DATABASE_URL=" + pg.URL("127.0.0.1", "orderpipe_tls", verify("verify-full", certs.OtherCA)), "unknown authority"},
		{"NoTLS", "DATABASE_URL=" + pg.URL("127.0.0.1", "orderpipe_tls", "sslmode=disable"), "pg_hba.conf"},
		{"WrongPassword", "DATABASE_URL=" + strings.Replace(pg.URL("127.0.0.1", "orderpipe_tls", verify("verify-full", certs.CA)), pw, "x"+pw+"x", 1),
			"password authentication failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runBinary(t, []string{tc.env}, "migrate")
			if strings.Contains(res.String(), pw) {
				t.Errorf("the password is shown: %s", res)
			}
			if tc.want != "" {
				if res.code == 0 || !strings.Contains(res.stderr, tc.want) {
					t.Errorf("migrate: want a failure with %q: %s", tc.want, res)
				}
				return
			}
			if res.code != 0 {
				t.Fatalf("migrate: %s", res)
			}
			res = runBinary(t, append([]string{tc.env}, redisEnv...), "reconciler", "--once")
			if res.code != 0 {
				t.Errorf("reconciler --once: %s", res)
			}
		})
	}
}

// testKafkaOverSASLSSL: with KAFKA_TLS, the CA and a SASL mechanism every
// Kafka client of the pipeline works on a real Apache Kafka that only speaks
// SASL_SSL: `orderpipe topics` (each mechanism, the password from a file)
// and the gateway's readiness ping in the production binary; and in the
// `all` wiring the producer, the worker's consumer group, its DLQ writer,
// the redrive's writer and the lag reader's client.
func testKafkaOverSASLSSL(t *testing.T, e engine) {
	certs := testenv.MustTLS(t, "orderpipe")
	plain := testenv.KafkaUser{Name: "alice", Password: "alice-Pw-77c1"}
	scram := testenv.KafkaUser{Name: "carol", Password: "carol-Pw-13d8"}
	k := testenv.MustSecureKafka(t, certs, plain, scram)
	dir := t.TempDir()
	pwFile := func(pw string) string {
		p := filepath.Join(dir, testenv.UniqueName("pw"))
		if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kafkaEnv := func(mech string, u testenv.KafkaUser) []string {
		return []string{"KAFKA_BROKERS=" + k.SASLSSL, "KAFKA_TLS=true", "KAFKA_TLS_CA_FILE=" + certs.CA,
			"KAFKA_SASL_MECHANISM=" + mech, "KAFKA_SASL_USERNAME=" + u.Name, "KAFKA_SASL_PASSWORD_FILE=" + pwFile(u.Password)}
	}

	t.Run("Topics", func(t *testing.T) {
		for _, tc := range []struct {
			mech string
			user testenv.KafkaUser
		}{{"PLAIN", plain}, {"SCRAM-SHA-256", scram}, {"SCRAM-SHA-512", scram}} {
			topic := testenv.UniqueName("orders.tls.")
			res := runBinary(t, append(kafkaEnv(tc.mech, tc.user), "KAFKA_TOPIC="+topic, "KAFKA_DLQ_TOPIC="+topic+".dlq",
				"KAFKA_PARTITIONS=2"), "topics")
			if res.code != 0 || !strings.Contains(res.stderr, "topics ready") {
				t.Errorf("topics with %s: %s", tc.mech, res)
			}
			assertNoKafkaPassword(t, res.String(), plain, scram)
		}
		wrong := testenv.KafkaUser{Name: scram.Name, Password: "wrong-" + scram.Password}
		res := runBinary(t, kafkaEnv("SCRAM-SHA-512", wrong), "topics")
		if res.code != 2 || !strings.Contains(res.stderr, "SASL") {
			t.Errorf("topics with a wrong password: want exit 2 (could not run) naming SASL: %s", res)
		}
		assertNoKafkaPassword(t, res.String(), wrong, plain, scram)
	})

	t.Run("GatewayReadiness", func(t *testing.T) {
		db := testenv.MustDatabase(t)
		httpAddr := freeAddr(t)
		g := startBinary(t, "gateway", append(kafkaEnv("SCRAM-SHA-256", scram), "DATABASE_URL="+db.URL, "REDIS_ADDR="+testenv.RedisAddr(),
			"REDIS_KEY_PREFIX="+testenv.UniqueName("t")+":", "HTTP_ADDR="+httpAddr)...)
		if body := g.mustAnswerOK(t, "http://"+httpAddr+"/readyz"); !strings.Contains(body, `"kafka":"ok"`) {
			t.Errorf("/readyz: %s", body)
		}
		g.mustStop(t)
		out := g.out.String()
		if !strings.Contains(out, `"kafka_security":"SASL_SSL (SCRAM-SHA-256)"`) {
			t.Errorf("the start line does not say how Kafka is reached:\n%s", out)
		}
		assertNoKafkaPassword(t, out, plain, scram)
	})

	t.Run("Pipeline", func(t *testing.T) {
		sec, err := event.SecurityConfig{TLS: true, CAFile: certs.CA, Mechanism: "SCRAM-SHA-512", Username: scram.Name,
			Password: scram.Password}.Load()
		if err != nil {
			t.Fatal(err)
		}
		p := mustPipeline(t, e, both, func(c *config) {
			c.Kafka.Brokers, c.Kafka.Security = []string{k.SASLSSL}, sec
			c.Kafka.ReplicationFactor = 1 // one broker, whatever the real-engine tier sets
			c.Worker.RedriveAfter, c.Worker.RedriveInterval = time.Second, 200*time.Millisecond
		})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		it := stock.Item{ActivityID: 3, ItemID: 4}
		p.mustSale(t, 3, 1, map[int64]int64{4: 10})
		unpaid := func(orderNo string) {
			t.Helper()
			testenv.WaitFor(t, time.Minute, "order "+orderNo+" UNPAID", func() bool {
				return p.do(t, "GET", "/v1/orders/"+orderNo, "", nil).Str("status") == "UNPAID"
			})
		}
		// The producer and the worker's consumer group.
		r := p.mustAccept(t, orderBody{RequestID: "tls-1", UserID: 1, ActivityID: 3, ItemID: 4, Quantity: 1})
		unpaid(r.Str("orderNo"))

		// The redrive's writer: a reservation whose event never reached
		// Kafka (its gateway died) is published by the redrive.
		ev := event.OrderRequested{RequestID: "tls-stranded", OrderNo: "3-4-tlsstranded", UserID: 2, ActivityID: 3, ItemID: 4,
			Quantity: 1, ReservedAt: time.Now().Add(-time.Minute).UTC()}
		if res, err := p.Stock.Reserve(ctx, stock.Reservation{Item: it, RequestID: ev.RequestID, OrderNo: ev.OrderNo, UserID: 2,
			Quantity: 1, Fingerprint: "fp", Event: ev.Marshal()}); err != nil || res.Outcome != stock.Reserved {
			t.Fatalf("reserving: %v %v", res.Outcome, err)
		}
		unpaid(ev.OrderNo)

		// The DLQ writer: a poison message ends on the dead-letter topic.
		w := event.NewWriter(event.WriterConfig{Brokers: []string{k.SASLSSL}, Topic: p.Cfg.Kafka.Topic, Security: sec})
		defer w.Close()
		mustWrite(t, ctx, w, kafka.Message{Key: []byte("3:4"), Value: []byte("not an event")})
		dlq := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{k.SASLSSL}, GroupID: testenv.UniqueName("dlq."), Topic: p.Cfg.Kafka.DLQTopic,
			StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond, Dialer: sec.Dialer(10 * time.Second)})
		defer dlq.Close()
		m, err := dlq.FetchMessage(ctx)
		if err != nil || string(m.Value) != "not an event" {
			t.Fatalf("dead letter: %q %v", m.Value, err)
		}

		// The lag reader's client (worker.lagLoop builds the same from
		// Config.Security): the group's lag, read from the broker over
		// SASL_SSL, comes down to 0.
		tr := sec.Transport(5 * time.Second)
		defer tr.CloseIdleConnections()
		client := &kafka.Client{Addr: kafka.TCP(k.SASLSSL), Transport: tr}
		testenv.WaitFor(t, time.Minute, "the group's lag to reach 0", func() bool {
			lag, err := worker.GroupLag(ctx, client, p.Cfg.Kafka.Topic, p.Cfg.Worker.Group)
			if err != nil {
				t.Fatalf("reading the group's lag over SASL_SSL: %v", err)
			}
			return lag == 0
		})
		p.waitDrained(t, it)
		p.assertInvariants(t, it)
	})
}

func assertNoKafkaPassword(t *testing.T, out string, users ...testenv.KafkaUser) {
	t.Helper()
	for _, u := range users {
		if strings.Contains(out, u.Password) {
			t.Errorf("the password of %s is shown:\n%s", u.Name, out)
		}
	}
}
