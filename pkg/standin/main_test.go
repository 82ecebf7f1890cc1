package standin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/setting"
)

// TestEmbeddedBrokerDataDirSurvivesRestart: with KAFKA_EMBEDDED_DIR the
// broker of `orderpipe kafka` reloads its messages and the consumer group's
// committed offsets, so a worker group resumes where it stopped instead of
// re-reading the topic. (The chaos suite kills it with SIGKILL instead.)
func TestEmbeddedBrokerDataDirSurvivesRestart(t *testing.T) {
	t.Parallel()
	cfg := Embedded{Partitions: 2, Dir: t.TempDir(), RetainMB: 16, DLQRetainMB: 64, Group: "orderpipe-worker",
		Topic: "orders.requested", DLQTopic: "orders.requested.dlq"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	brokers, stop, err := startBroker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := event.NewWriter(event.WriterConfig{Brokers: brokers, Topic: cfg.Topic})
	for i := range 10 {
		if err := w.WriteMessages(ctx, kafka.Message{Key: fmt.Appendf(nil, "k%d", i%3), Value: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	seen := map[string]bool{}
	consume(ctx, t, brokers, cfg.Topic, 4, seen)
	stop()

	brokers, stop, err = startBroker(cfg) // same dir, another port
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	consume(ctx, t, brokers, cfg.Topic, 6, seen)
	if len(seen) != 10 {
		t.Errorf("after the restart the group read %d distinct messages of 10: it did not resume at its offsets", len(seen))
	}
	// Nothing is left: the group's offsets were all committed.
	r := groupReader(brokers, cfg.Topic)
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

// TestEmbeddedBrokerRetentionWaitsForTheWorkerGroup: the broker of `all` and
// `kafka` deletes old records on its own (KAFKA_EMBEDDED_RETENTION_MB,
// KAFKA_EMBEDDED_DLQ_RETENTION_MB), but on the order topic never one the
// group KAFKA_GROUP has not committed: 3 MiB on a 1 MiB budget, of which the
// group committed the first 1000 records, is cut at record 1000 exactly (the
// budget alone would cut near 2000); orders.status, which no group guards,
// is cut to the order topic's budget, and the dead-letter topic to its own. On disk (KAFKA_EMBEDDED_DIR, as the
// chaos suite runs it) the cut survives a restart, and the group resumes at
// its offset and reads every record it had not committed.
func TestEmbeddedBrokerRetentionWaitsForTheWorkerGroup(t *testing.T) {
	t.Parallel()
	for _, onDisk := range []bool{false, true} {
		name := "InMemory"
		if onDisk {
			name = "OnDisk"
		}
		t.Run(name, func(t *testing.T) { testRetention(t, onDisk) })
	}
}

func testRetention(t *testing.T, onDisk bool) {
	cfg := Embedded{Partitions: 1, Group: "g", RetainMB: 1, DLQRetainMB: 2, Topic: "orders.requested", DLQTopic: "orders.requested.dlq",
		StatusTopic: "orders.status"}
	if onDisk {
		cfg.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	brokers, stop, err := startBroker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stop() }()
	const n, committed = 3000, 1000
	for _, topic := range []string{cfg.Topic, cfg.DLQTopic, cfg.StatusTopic} {
		w := event.NewWriter(event.WriterConfig{Brokers: brokers, Topic: topic})
		w.BatchSize = 10
		msgs := make([]kafka.Message, n)
		for i := range msgs {
			msgs[i] = kafka.Message{Value: fmt.Appendf(make([]byte, 1000), "%d", i)}
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	r := groupReader(brokers, cfg.Topic)
	for range committed {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetching: %v", err)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	// bounds polls the partition's first and next offset until done says
	// so, failing after 20 s (the retention runs once a second).
	bounds := func(topic string, done func(first, next int64) bool) {
		t.Helper()
		var first, next int64
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, 0)
			if err != nil {
				t.Fatal(err)
			}
			first, next, err = conn.ReadOffsets()
			conn.Close()
			if err != nil {
				t.Fatal(err)
			}
			if first > committed && topic == cfg.Topic {
				t.Fatalf("%s: records below %d deleted, the group committed only %d", topic, first, committed)
			}
			if done(first, next) {
				return
			}
		}
		t.Fatalf("%s holds [%d, %d) after 20 s", topic, first, next)
	}
	bounds(cfg.Topic, func(first, next int64) bool { return first == committed && next == n })
	// ~1 KiB a record: a 1 MiB budget keeps about a thousand, 2 MiB two.
	bounds(cfg.StatusTopic, func(first, next int64) bool { return next == n && first > n-1200 && first < n-800 })
	bounds(cfg.DLQTopic, func(first, next int64) bool { return next == n && first > n-2400 && first < n-1600 })
	if !onDisk {
		return
	}

	stop()
	brokers, stop, err = startBroker(cfg) // same dir, another port
	if err != nil {
		t.Fatal(err)
	}
	bounds(cfg.Topic, func(first, next int64) bool { return next == n && first <= committed })
	r = groupReader(brokers, cfg.Topic)
	defer r.Close()
	for want := committed; want < n; want++ {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetching record %d after the restart: %v", want, err)
		}
		if got := string(bytes.TrimLeft(m.Value, "\x00")); m.Offset != int64(want) || got != fmt.Sprint(want) {
			t.Fatalf("after the restart the group read offset %d (record %q), want record %d", m.Offset, got, want)
		}
	}
}

// TestLimitMemory: KAFKA_EMBEDDED_MEMORY_LIMIT_MB becomes the process's soft
// memory limit, unless it is 0 or GOMEMLIMIT is in the environment.
func TestLimitMemory(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	prev, had := os.LookupEnv("GOMEMLIMIT")
	os.Unsetenv("GOMEMLIMIT")
	defer func() {
		if had {
			os.Setenv("GOMEMLIMIT", prev)
		}
	}()

	if (Embedded{}).LimitMemory() || debug.SetMemoryLimit(-1) != before {
		t.Fatal("a 0 limit changed the process's limit")
	}
	if !(Embedded{MemoryLimitMB: 123}).LimitMemory() || debug.SetMemoryLimit(-1) != 123<<20 {
		t.Fatalf("limit %d after LimitMemory(123 MiB)", debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(before)
	t.Setenv("GOMEMLIMIT", "1GiB")
	if (Embedded{MemoryLimitMB: 123}).LimitMemory() || debug.SetMemoryLimit(-1) != before {
		t.Fatal("LimitMemory overrode GOMEMLIMIT")
	}
}

// TestNegativeMemoryLimitIsRefused: a negative KAFKA_EMBEDDED_MEMORY_LIMIT_MB
// is a mistake to report, not "no limit".
func TestNegativeMemoryLimitIsRefused(t *testing.T) {
	for limit, refused := range map[string]bool{"-5": true, "0": false, "200": false} {
		r := &setting.Reader{Env: func(name string) string {
			if name == "KAFKA_EMBEDDED_MEMORY_LIMIT_MB" {
				return limit
			}
			return "1"
		}}
		ReadEmbedded(r)
		if err := r.Err(); refused != (err != nil && strings.Contains(err.Error(), "KAFKA_EMBEDDED_MEMORY_LIMIT_MB")) {
			t.Errorf("limit %s: %v, refused should be %v", limit, err, refused)
		}
	}
}

// TestPortOutOfRangeIsRefused: an embedded broker's port over 65535 is a
// bad setting named at start, not a listen error later.
func TestPortOutOfRangeIsRefused(t *testing.T) {
	for _, name := range []string{"KAFKA_EMBEDDED_PORT", "KAFKA_EMBEDDED_ADVERTISED_PORT"} {
		for port, refused := range map[string]bool{"70000": true, "65536": true, "65535": false, "0": false} {
			r := &setting.Reader{Env: func(n string) string {
				if n == name {
					return port
				}
				return "1"
			}}
			ReadEmbedded(r)
			if err := r.Err(); refused != (err != nil && strings.Contains(err.Error(), name)) {
				t.Errorf("%s=%s: %v, refused should be %v", name, port, err, refused)
			}
		}
	}
}

// startBroker starts cfg's broker for a test: its bootstrap list and stop.
func startBroker(cfg Embedded) (brokers []string, stop func(), err error) {
	k, err := cfg.Start()
	if err != nil {
		return nil, nil, err
	}
	return k.Brokers, k.Close, nil
}
