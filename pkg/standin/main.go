package standin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"orderpipe/pkg/event"
	"orderpipe/pkg/setting"
)

// Embedded is the embedded broker of `orderpipe all` and `orderpipe kafka`,
// as the settings describe it.
type Embedded struct {
	Port, AdvertisedPort, Partitions int
	Dir                              string // KAFKA_EMBEDDED_DIR; empty ⇒ in memory
	RetainMB, DLQRetainMB            int    // KAFKA_EMBEDDED_RETENTION_MB, KAFKA_EMBEDDED_DLQ_RETENTION_MB
	MemoryLimitMB                    int    // KAFKA_EMBEDDED_MEMORY_LIMIT_MB: LimitMemory
	Topic, DLQTopic, StatusTopic     string
	Group                            string
}

// ReadEmbedded reads the embedded broker's settings.
func ReadEmbedded(r *setting.Reader) Embedded {
	e := Embedded{Port: r.Int("KAFKA_EMBEDDED_PORT"), AdvertisedPort: r.Int("KAFKA_EMBEDDED_ADVERTISED_PORT"),
		Partitions: r.Int("KAFKA_PARTITIONS"), Dir: r.String("KAFKA_EMBEDDED_DIR"), RetainMB: r.Int("KAFKA_EMBEDDED_RETENTION_MB"),
		DLQRetainMB: r.Int("KAFKA_EMBEDDED_DLQ_RETENTION_MB"), Topic: r.String("KAFKA_TOPIC"), DLQTopic: r.String("KAFKA_DLQ_TOPIC"),
		StatusTopic: r.String("KAFKA_STATUS_TOPIC"), MemoryLimitMB: r.Int("KAFKA_EMBEDDED_MEMORY_LIMIT_MB"),
		Group: r.String("KAFKA_GROUP")}
	for name, port := range map[string]int{"KAFKA_EMBEDDED_PORT": e.Port, "KAFKA_EMBEDDED_ADVERTISED_PORT": e.AdvertisedPort} {
		if port > 65535 {
			r.Fail("%s: want a port number 0-65535, got %d", name, port)
		}
	}
	return e // r.Int refuses a negative number
}

// LimitMemory sets the process's soft memory limit to MemoryLimitMB, unless
// it is 0 or GOMEMLIMIT is set (the runtime applied that one already), and
// says whether it did. A process that embeds the broker holds the events
// it retains (the uncommitted ones and about KAFKA_EMBEDDED_RETENTION_MB
// of history per topic) beside what the pipeline allocates per request;
// at GOGC=200 the collector lets the heap grow to three times what is live,
// and the limit bounds that headroom instead.
func (cfg Embedded) LimitMemory() bool {
	if cfg.MemoryLimitMB <= 0 || setting.Set("GOMEMLIMIT") {
		return false
	}
	debug.SetMemoryLimit(int64(cfg.MemoryLimitMB) << 20)
	return true
}

// KafkaMain is `orderpipe kafka`: the embedded broker alone, so the components
// can run as separate processes against a broker that can be stopped, killed
// and restarted (the chaos suite does). With KAFKA_EMBEDDED_DIR the broker
// keeps its log on disk, synced before each produce is acknowledged, so a kill
// loses no acknowledged message and a restart resumes the topics and the
// consumer groups' committed offsets.
func KafkaMain(ctx context.Context, args []string, env setting.Env, stdout, stderr io.Writer) int {
	if err := runKafka(ctx, slog.Default(), env); err != nil {
		slog.Error("orderpipe failed", "err", err)
		return 1
	}
	return 0
}

func runKafka(ctx context.Context, log *slog.Logger, env setting.Env) error {
	r := &setting.Reader{Env: env}
	cfg := ReadEmbedded(r)
	if err := r.Err(); err != nil {
		return err
	}
	cfg.LimitMemory()
	k, err := cfg.Start()
	if err != nil {
		return fmt.Errorf("%w (set KAFKA_EMBEDDED_PORT to another port)", err)
	}
	defer k.Close()
	brokers := k.Brokers
	// A data dir from an earlier run is reloaded as it was: topics it lacks
	// (another KAFKA_TOPIC) are created here, not by the seed.
	if err := event.EnsureTopics(ctx, brokers, cfg.Partitions, 1, cfg.Topic, cfg.DLQTopic, cfg.StatusTopic); err != nil {
		return err
	}
	dir := cfg.Dir
	if dir == "" {
		dir = "(in memory)"
	}
	log.Info("kafka broker listening", "brokers", strings.Join(brokers, ","), "data_dir", dir,
		"topics", []string{cfg.Topic, cfg.DLQTopic, cfg.StatusTopic}, "retention_mib", cfg.RetainMB, "dlq_retention_mib", cfg.DLQRetainMB,
		"guarded_by_group", cfg.Group)
	<-ctx.Done()
	log.Info("kafka broker stopping")
	return nil
}

// retentionInterval is how often the embedded broker deletes what its
// retention allows: at the ~10k events/s this machine's pipeline takes, a
// second adds a few MiB.
const retentionInterval = time.Second

// Start starts the embedded kfake broker of `all` and `kafka` on
// KAFKA_EMBEDDED_PORT, persistent when KAFKA_EMBEDDED_DIR is set. It keeps
// what the worker group has not committed, and beyond that about
// KAFKA_EMBEDDED_RETENTION_MB of the order topic and as much of
// orders.status, and KAFKA_EMBEDDED_DLQ_RETENTION_MB of dead letters
// (Retention), so a long `make run` stays bounded.
func (cfg Embedded) Start() (*Kafka, error) {
	k, err := StartKafka(KafkaOptions{Port: cfg.Port, Partitions: cfg.Partitions,
		Topics: []string{cfg.Topic, cfg.DLQTopic, cfg.StatusTopic}, Dir: cfg.Dir, AdvertisedPort: cfg.AdvertisedPort,
		Retention: Retention{Interval: retentionInterval,
			// orders.status keeps its newest KAFKA_EMBEDDED_RETENTION_MB,
			// as the order topic its committed history (no group guards
			// it: every order's events, so the history is what costs).
			Bytes: map[string]int64{cfg.Topic: int64(cfg.RetainMB) << 20, cfg.DLQTopic: int64(cfg.DLQRetainMB) << 20,
				cfg.StatusTopic: int64(cfg.RetainMB) << 20},
			Guard: map[string]string{cfg.Topic: cfg.Group}},
		RetentionErrFunc: func(err error) { slog.Warn("embedded broker: deleting old records", "err", err) },
		StaleFunc: func(reaped []string, err error) {
			if len(reaped) > 0 {
				slog.Warn("embedded broker: removed group members silent past their session timeout", "members", reaped)
			}
			if err != nil {
				slog.Warn("embedded broker: removing silent group members", "err", err)
			}
		}})
	if err != nil {
		return nil, err
	}
	return k, nil
}
