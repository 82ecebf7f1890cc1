package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
)

// config is every environment variable the binary reads, with its default.
// The README's configuration table mirrors this list.
type config struct {
	HTTPAddr       string
	DatabaseURL    string
	DBMaxConns     int
	RedisAddr      string
	RedisPrefix    string
	KafkaBrokers   []string
	KafkaPort      int
	KafkaTopic     string
	KafkaDLQTopic  string
	KafkaGroup     string
	KafkaParts     int
	KafkaBatchWait time.Duration
	AdminToken     string
	BatchSize      int
	BatchWait      time.Duration
	ProduceTimeout time.Duration
	MetricsAddr    string
}

// envVars lists the variables config reads: name, default, meaning.
var envVars = [][3]string{
	{"HTTP_ADDR", ":8080", "gateway listen address"},
	{"DATABASE_URL", database.DefaultURL, "Postgres; the database is created if missing"},
	{"DB_MAX_CONNS", "20", "Postgres pool size per process"},
	{"REDIS_ADDR", "127.0.0.1:6379", "Redis host:port"},
	{"REDIS_KEY_PREFIX", "", "prefix of every Redis key (isolates tenants/tests)"},
	{"KAFKA_BROKERS", "", "comma-separated brokers; empty ⇒ `all` starts an embedded broker"},
	{"KAFKA_EMBEDDED_PORT", "9092", "port of the embedded broker (127.0.0.1)"},
	{"KAFKA_TOPIC", event.Topic, "topic of order events"},
	{"KAFKA_DLQ_TOPIC", event.DLQTopic, "dead-letter topic"},
	{"KAFKA_GROUP", "orderpipe-worker", "worker consumer group"},
	{"KAFKA_PARTITIONS", "8", "partitions when orderpipe creates the topics"},
	{"KAFKA_BATCH_TIMEOUT", "2ms", "producer linger before a batch is sent"},
	{"ADMIN_TOKEN", "", "bearer token of the admin API; empty ⇒ admin API off"},
	{"WORKER_BATCH_SIZE", "500", "max messages per worker transaction"},
	{"WORKER_BATCH_WAIT", "5ms", "how long a started batch waits for more messages"},
	{"METRICS_ADDR", ":9090", "/metrics listener of a process without the gateway"},
	{"PRODUCE_TIMEOUT", "3s", "bound on one produce before the reservation is released and 503 answered"},
}

func getenv(name string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	for _, e := range envVars {
		if e[0] == name {
			return e[1]
		}
	}
	panic("undeclared environment variable " + name)
}

func loadConfig() (config, error) {
	var errs []string
	intVar := func(name string) int {
		n, err := strconv.Atoi(getenv(name))
		if err != nil || n < 0 {
			errs = append(errs, fmt.Sprintf("%s: want a non-negative integer, got %q", name, getenv(name)))
		}
		return n
	}
	durVar := func(name string) time.Duration {
		d, err := time.ParseDuration(getenv(name))
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Sprintf("%s: want a positive Go duration such as 30s, got %q", name, getenv(name)))
		}
		return d
	}
	c := config{
		HTTPAddr:       getenv("HTTP_ADDR"),
		DatabaseURL:    getenv("DATABASE_URL"),
		DBMaxConns:     intVar("DB_MAX_CONNS"),
		RedisAddr:      getenv("REDIS_ADDR"),
		RedisPrefix:    getenv("REDIS_KEY_PREFIX"),
		KafkaBrokers:   event.ParseBrokers(getenv("KAFKA_BROKERS")),
		KafkaPort:      intVar("KAFKA_EMBEDDED_PORT"),
		KafkaTopic:     getenv("KAFKA_TOPIC"),
		KafkaDLQTopic:  getenv("KAFKA_DLQ_TOPIC"),
		KafkaGroup:     getenv("KAFKA_GROUP"),
		KafkaParts:     intVar("KAFKA_PARTITIONS"),
		KafkaBatchWait: durVar("KAFKA_BATCH_TIMEOUT"),
		AdminToken:     getenv("ADMIN_TOKEN"),
		BatchSize:      intVar("WORKER_BATCH_SIZE"),
		BatchWait:      durVar("WORKER_BATCH_WAIT"),
		ProduceTimeout: durVar("PRODUCE_TIMEOUT"),
		MetricsAddr:    getenv("METRICS_ADDR"),
	}
	if c.KafkaParts == 0 {
		errs = append(errs, "KAFKA_PARTITIONS: want at least 1")
	}
	if len(errs) > 0 {
		return config{}, fmt.Errorf("bad configuration:\n  %s", strings.Join(errs, "\n  "))
	}
	return c, nil
}
