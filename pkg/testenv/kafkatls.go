package testenv

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	kscram "github.com/segmentio/kafka-go/sasl/scram"
)

// SecureKafka is a real Apache Kafka broker (one KRaft node, the jars of
// deploy/kafka/kafka.sh) with a SASL_SSL listener (PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512) and an SSL listener that requires a client certificate,
// both with the test CA's server certificate for 127.0.0.1/localhost.
type SecureKafka struct {
	SASLSSL string // 127.0.0.1:port of the SASL_SSL listener
	SSL     string // 127.0.0.1:port of the SSL listener (mutual TLS)
}

// KafkaUser is a SASL account of SecureKafka: a PLAIN user (in the JAAS
// config) and a SCRAM user (SHA-256 and SHA-512, added at format time).
type KafkaUser struct{ Name, Password string }

// kafkaScript is deploy/kafka/kafka.sh of this module.
func kafkaScript(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "deploy", "kafka", "kafka.sh")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// kafkaJarsCached reports whether kafka.sh has its jars (it fetches them
// with Maven otherwise, which the fast test tier does not do).
func kafkaJarsCached(script string) bool {
	pom, err := os.ReadFile(filepath.Join(filepath.Dir(script), "pom.xml"))
	if err != nil {
		return false
	}
	m := regexp.MustCompile(`<kafka.version>(.*)</kafka.version>`).FindSubmatch(pom)
	if m == nil {
		return false
	}
	root := os.Getenv("ORDERPIPE_CACHE")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return false
		}
		root = filepath.Join(home, ".cache", "orderpipe")
	}
	_, err = os.Stat(filepath.Join(root, "kafka-"+string(m[1]), "complete"))
	return err == nil
}

// MustSecureKafka starts the broker (stopped and removed at cleanup), with
// plain as the PLAIN user and scram as the SCRAM user. It skips when Java or
// the Kafka jars are missing, unless TEST_KAFKA_TLS=1 (then it fails):
// `make test-kafka` fetches the jars, `deploy/kafka/kafka.sh fetch` too.
func MustSecureKafka(tb testing.TB, certs TLSFiles, plain, scram KafkaUser) SecureKafka {
	tb.Helper()
	script := kafkaScript(tb)
	must := os.Getenv("TEST_KAFKA_TLS") == "1"
	if _, err := exec.LookPath("java"); err != nil || (!must && !kafkaJarsCached(script)) {
		tb.Skip("no java or no cached Kafka jars (deploy/kafka/kafka.sh fetch; make test-kafka runs this); TEST_KAFKA_TLS=1 requires it")
	}
	if must {
		if out, err := exec.Command(script, "fetch").CombinedOutput(); err != nil {
			tb.Fatalf("kafka.sh fetch: %v\n%s", err, out)
		}
	}
	dir := tb.TempDir()
	// A PEM keystore is the private key and the certificate chain in one file.
	key, err := os.ReadFile(certs.ServerKey)
	if err != nil {
		tb.Fatal(err)
	}
	crt, err := os.ReadFile(certs.ServerCert)
	if err != nil {
		tb.Fatal(err)
	}
	keystore := filepath.Join(dir, "keystore.pem")
	if err := os.WriteFile(keystore, append(key, crt...), 0o600); err != nil {
		tb.Fatal(err)
	}
	base, err := os.ReadFile(filepath.Join(filepath.Dir(script), "server.properties"))
	if err != nil {
		tb.Fatal(err)
	}
	plainPort, sslPort, saslPort, ctrlPort := mustFreePort(tb, 0), mustFreePort(tb, 0), mustFreePort(tb, 0), mustFreePort(tb, 0)
	jaas := func(s string) string { return strings.ReplaceAll(s, `"`, `\"`) }
	props := string(base) + fmt.Sprintf(`
# ---- added by testenv.MustSecureKafka ----
node.id=1
controller.quorum.voters=1@127.0.0.1:%[4]d
log.dirs=%[5]s
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL
listeners=PLAINTEXT://127.0.0.1:%[1]d,SSL://127.0.0.1:%[2]d,SASL_SSL://127.0.0.1:%[3]d,CONTROLLER://127.0.0.1:%[4]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d,SSL://127.0.0.1:%[2]d,SASL_SSL://127.0.0.1:%[3]d
ssl.keystore.type=PEM
ssl.keystore.location=%[6]s
ssl.truststore.type=PEM
ssl.truststore.location=%[7]s
listener.name.ssl.ssl.client.auth=required
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_%[8]s="%[9]s";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
`, plainPort, sslPort, saslPort, ctrlPort, filepath.Join(dir, "data"), keystore, certs.CA, plain.Name, jaas(plain.Password))
	propsFile := filepath.Join(dir, "server.properties")
	if err := os.WriteFile(propsFile, []byte(props), 0o600); err != nil {
		tb.Fatal(err)
	}
	var id [16]byte
	rand.Read(id[:]) //nolint:errcheck // never fails
	cid := "A" + base64.RawURLEncoding.EncodeToString(id[:])[1:]
	format := exec.Command(script, "java", "kafka.tools.StorageTool", "format", "--cluster-id", cid, "--config", propsFile,
		"--add-scram", fmt.Sprintf("SCRAM-SHA-256=[name=%s,password=%s]", scram.Name, scram.Password),
		"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", scram.Name, scram.Password))
	if out, err := format.CombinedOutput(); err != nil {
		tb.Fatalf("formatting the broker's storage: %v\n%s", err, out)
	}
	logPath := filepath.Join(dir, "broker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	broker := exec.Command(script, "java", "kafka.Kafka", propsFile) // kafka.sh execs the JVM: this pid is the broker
	broker.Stdout, broker.Stderr = logFile, logFile
	if err := broker.Start(); err != nil {
		tb.Fatalf("starting the broker: %v", err)
	}
	exited := make(chan struct{})
	go func() { broker.Wait(); logFile.Close(); close(exited) }() //nolint:errcheck
	tb.Cleanup(func() {
		broker.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			broker.Process.Kill() //nolint:errcheck
			<-exited
		}
	})
	k := SecureKafka{SASLSSL: "127.0.0.1:" + strconv.Itoa(saslPort), SSL: "127.0.0.1:" + strconv.Itoa(sslPort)}
	// Ready when a SCRAM login over TLS answers a metadata request (built
	// here, not with pkg/event, which imports telemetry, whose tests use
	// this package).
	ca, err := os.ReadFile(certs.CA)
	if err != nil {
		tb.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	mech, err := kscram.Mechanism(kscram.SHA512, scram.Name, scram.Password)
	if err != nil {
		tb.Fatal(err)
	}
	dialer := &kafka.Dialer{Timeout: 5 * time.Second, TLS: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, SASLMechanism: mech}
	WaitFor(tb, 3*time.Minute, "the SASL_SSL broker to answer", func() bool {
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			tb.Fatalf("the broker exited:\n%s", tail(log, 4000))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := dialer.DialContext(ctx, "tcp", k.SASLSSL)
		if err != nil {
			return false
		}
		defer conn.Close()
		_, err = conn.Brokers()
		return err == nil
	})
	return k
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
