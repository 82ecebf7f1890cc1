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
	script := mustKafkaJars(tb)
	dir := tb.TempDir()
	ports := brokerPorts{plain: mustFreePort(tb, 0), ssl: mustFreePort(tb, 0), sasl: mustFreePort(tb, 0), ctrl: mustFreePort(tb, 0)}
	propsFile := mustBrokerProperties(tb, script, dir, ports, certs, plain)
	mustFormatStorage(tb, script, propsFile, scram)
	b := mustStartBroker(tb, script, propsFile, dir)
	k := SecureKafka{SASLSSL: "127.0.0.1:" + strconv.Itoa(ports.sasl), SSL: "127.0.0.1:" + strconv.Itoa(ports.ssl)}
	b.waitReady(tb, k.SASLSSL, certs, scram)
	return k
}

// mustKafkaJars is kafka.sh, its jars fetched; it skips the test when Java
// or the cached jars are missing, unless TEST_KAFKA_TLS=1 asks for them.
func mustKafkaJars(tb testing.TB) (script string) {
	tb.Helper()
	script = kafkaScript(tb)
	must := os.Getenv("TEST_KAFKA_TLS") == "1"
	if _, err := exec.LookPath("java"); err != nil || (!must && !kafkaJarsCached(script)) {
		tb.Skip("no java or no cached Kafka jars (deploy/kafka/kafka.sh fetch; make test-kafka runs this); TEST_KAFKA_TLS=1 requires it")
	}
	if must {
		if out, err := exec.Command(script, "fetch").CombinedOutput(); err != nil {
			tb.Fatalf("kafka.sh fetch: %v\n%s", err, out)
		}
	}
	return script
}

// brokerPorts are the broker's listeners' ports.
type brokerPorts struct{ plain, ssl, sasl, ctrl int }

// mustBrokerProperties writes the broker's configuration into dir:
// kafka.sh's server.properties with this node's listeners, the test CA's
// server certificate and the PLAIN user. It returns the file's path.
func mustBrokerProperties(tb testing.TB, script, dir string, ports brokerPorts, certs TLSFiles, plain KafkaUser) string {
	tb.Helper()
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
`, ports.plain, ports.ssl, ports.sasl, ports.ctrl, filepath.Join(dir, "data"), keystore, certs.CA, plain.Name, jaas(plain.Password))
	propsFile := filepath.Join(dir, "server.properties")
	if err := os.WriteFile(propsFile, []byte(props), 0o600); err != nil {
		tb.Fatal(err)
	}
	return propsFile
}

// mustFormatStorage formats the node's storage under a fresh cluster id,
// with the SCRAM user (a KRaft broker takes SCRAM accounts at format time).
func mustFormatStorage(tb testing.TB, script, propsFile string, scram KafkaUser) {
	tb.Helper()
	var id [16]byte
	rand.Read(id[:]) //nolint:errcheck // never fails
	cid := "A" + base64.RawURLEncoding.EncodeToString(id[:])[1:]
	format := exec.Command(script, "java", "kafka.tools.StorageTool", "format", "--cluster-id", cid, "--config", propsFile,
		"--add-scram", fmt.Sprintf("SCRAM-SHA-256=[name=%s,password=%s]", scram.Name, scram.Password),
		"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", scram.Name, scram.Password))
	if out, err := format.CombinedOutput(); err != nil {
		tb.Fatalf("formatting the broker's storage: %v\n%s", err, out)
	}
}

// runningBroker is a started broker process: exited is closed once it
// has, its output is in logPath.
type runningBroker struct {
	exited  chan struct{}
	logPath string
}

// mustStartBroker starts the broker, logging into dir; it is stopped at
// cleanup (SIGTERM, then killed after 20 s).
func mustStartBroker(tb testing.TB, script, propsFile, dir string) runningBroker {
	tb.Helper()
	b := runningBroker{exited: make(chan struct{}), logPath: filepath.Join(dir, "broker.log")}
	logFile, err := os.Create(b.logPath)
	if err != nil {
		tb.Fatal(err)
	}
	broker := exec.Command(script, "java", "kafka.Kafka", propsFile) // kafka.sh execs the JVM: this pid is the broker
	broker.Stdout, broker.Stderr = logFile, logFile
	if err := broker.Start(); err != nil {
		tb.Fatalf("starting the broker: %v", err)
	}
	go func() { broker.Wait(); logFile.Close(); close(b.exited) }() //nolint:errcheck
	tb.Cleanup(func() {
		broker.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		select {
		case <-b.exited:
		case <-time.After(20 * time.Second):
			broker.Process.Kill() //nolint:errcheck
			<-b.exited
		}
	})
	return b
}

// waitReady waits until a SCRAM login over TLS to addr answers a metadata
// request (built here, not with pkg/event, which imports telemetry, whose
// tests use this package); a broker that exits meanwhile fails the test
// with its log.
func (b runningBroker) waitReady(tb testing.TB, addr string, certs TLSFiles, scram KafkaUser) {
	tb.Helper()
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
		case <-b.exited:
			log, _ := os.ReadFile(b.logPath)
			tb.Fatalf("the broker exited:\n%s", tail(log, 4000))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return false
		}
		defer conn.Close()
		_, err = conn.Brokers()
		return err == nil
	})
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
