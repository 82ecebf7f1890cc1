package main

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/secret"
	"orderpipe/pkg/stock"
)

// config is every environment variable the binary reads, with its default.
// The README's configuration table mirrors this list.
type config struct {
	HTTPAddr       string
	DatabaseURL    string
	DBMaxConns     int
	RedisAddr      string
	RedisURL       string
	RedisUsername  string
	RedisPassword  string
	RedisTLSCA     string
	RedisTLSCert   string
	RedisTLSKey    string
	RedisPrefix    string
	KafkaBrokers   []string
	KafkaPort      int
	KafkaAdvPort   int
	KafkaDir       string
	KafkaRetainMB  int // KAFKA_EMBEDDED_RETENTION_MB
	KafkaDLQMB     int // KAFKA_EMBEDDED_DLQ_RETENTION_MB
	KafkaTopic     string
	KafkaDLQTopic  string
	KafkaGroup     string
	KafkaParts     int
	KafkaRF        int
	KafkaBatchWait time.Duration
	// GatewayProducer is "group" (event.Producer) or "writer" (kafka.Writer).
	GatewayProducer string
	KafkaSecurity   event.Security // KAFKA_TLS*, KAFKA_SASL_*
	kafkaSASLPass   string         // only for registerSecrets
	AdminToken      string
	ClockFile       string // DEV_CLOCK_OFFSET_FILE
	BatchSize       int
	BatchWait       time.Duration
	LagInterval     time.Duration
	ProduceTimeout  time.Duration
	ReplayWait      time.Duration
	PprofAddr       string
	GCPercent       int // GOGC; -1 ⇒ off
	MetricsAddr     string

	RedriveAfter      time.Duration
	RedriveInterval   time.Duration
	MoveInterval      time.Duration
	ReconcileInterval time.Duration

	UserRPS        float64
	UserBurst      int
	GlobalRPS      float64
	APITokens      []string
	AdminAddr      string
	BreakerOpenFor time.Duration
	RedisTimeout   time.Duration
	// RedisWait (REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT): each reserve
	// waits for that many replicas to acknowledge it before the produce.
	RedisWait      stock.ReplicaWait
	CloseAfter     time.Duration
	CloserInterval time.Duration
	// The relay of orders.status (pkg/relay).
	KafkaStatusTopic string
	RelayInterval    time.Duration
	RelayBatchSize   int
	StatusRetention  time.Duration
	// TraceStoreDir is the local span store (TRACE_STORE_DIR) that
	// `locate` reads a request's spans from; SetupTracing writes it.
	TraceStoreDir string
	// TraceQueryURL is the Jaeger query service (TRACE_QUERY_URL) that
	// `locate` reads a request's spans from; it takes precedence over
	// TraceStoreDir.
	TraceQueryURL string
}

// envVars lists the variables config reads: name, default, meaning.
var envVars = [][3]string{
	{"HTTP_ADDR", ":8080", "gateway listen address"},
	{"DATABASE_URL", database.DefaultURL, "Postgres; the database is created if missing"},
	{"DB_MAX_CONNS", "20", "Postgres pool size per process"},
	{"REDIS_ADDR", "127.0.0.1:6379", "Redis host:port; comma-separated nodes ⇒ Redis Cluster"},
	{"REDIS_URL", "", "instead of REDIS_ADDR: redis://[user[:password]@]host:port[/db], rediss:// for TLS; several hosts after one userinfo (rediss://u:p@h1:6379,h2:6379) ⇒ Redis Cluster"},
	{"REDIS_USERNAME", "", "Redis ACL user (when REDIS_URL names none)"},
	{"REDIS_PASSWORD", "", "Redis password of REDIS_USERNAME, or of the default user (requirepass); when REDIS_URL has none"},
	{"REDIS_TLS_CA_FILE", "", "PEM CA certificate(s) that verify the Redis server (rediss:// only); empty ⇒ the system's roots"},
	{"REDIS_TLS_CERT_FILE", "", "PEM client certificate for mutual TLS with Redis (with REDIS_TLS_KEY_FILE)"},
	{"REDIS_TLS_KEY_FILE", "", "PEM private key of REDIS_TLS_CERT_FILE"},
	{"REDIS_KEY_PREFIX", "", "prefix of every Redis key (isolates tenants/tests)"},
	{"KAFKA_BROKERS", "", "comma-separated brokers; empty ⇒ `all` starts an embedded broker"},
	{"KAFKA_EMBEDDED_PORT", "9092", "port of the embedded broker (127.0.0.1)"},
	{"KAFKA_EMBEDDED_ADVERTISED_PORT", "0", "port on 127.0.0.1 the embedded broker names to clients instead of its own (a proxy in front of it); 0 ⇒ its own"},
	{"KAFKA_EMBEDDED_DIR", "", "data directory of the embedded broker (messages and group offsets survive a restart); empty ⇒ in memory"},
	{"KAFKA_EMBEDDED_RETENTION_MB", "16", "the embedded broker keeps about this many MiB of KAFKA_TOPIC's history that KAFKA_GROUP has committed (what the worker has not committed is always kept); 0 ⇒ keep everything"},
	{"KAFKA_EMBEDDED_DLQ_RETENTION_MB", "64", "the embedded broker keeps about this many MiB of the newest dead letters (KAFKA_DLQ_TOPIC), and as many of the newest orders.status events (KAFKA_STATUS_TOPIC); 0 ⇒ keep every one"},
	{"KAFKA_TOPIC", event.Topic, "topic of order events"},
	{"KAFKA_DLQ_TOPIC", event.DLQTopic, "dead-letter topic"},
	{"KAFKA_STATUS_TOPIC", event.StatusTopic, "topic of orders.status, one event per state change of an order (key orderNo), published by the relay"},
	{"KAFKA_GROUP", "orderpipe-worker", "worker consumer group"},
	{"KAFKA_PARTITIONS", "8", "partitions when orderpipe creates the topics"},
	{"KAFKA_REPLICATION_FACTOR", "1", "replicas per partition when orderpipe creates the topics (3 on a 3-broker cluster; with min.insync.replicas=2 an acknowledged event survives one broker's loss)"},
	{"KAFKA_BATCH_TIMEOUT", "2ms", "linger of kafka-go's Writer before a batch is sent: the worker's dead-letter and redrive producers, and the gateway's with GATEWAY_PRODUCER=writer"},
	{"GATEWAY_PRODUCER", "group", "the gateway's producer: group (one produce request in flight per partition, the orders that arrive meanwhile sent together in the next, no linger) or writer (kafka-go's Writer, lingering KAFKA_BATCH_TIMEOUT); both acks=all"},
	{"KAFKA_TLS", "false", "true ⇒ TLS to every broker, verified against KAFKA_TLS_CA_FILE (else the system's roots) and the broker's host name"},
	{"KAFKA_TLS_CA_FILE", "", "PEM CA certificate(s) that verify the brokers (with KAFKA_TLS=true)"},
	{"KAFKA_TLS_CERT_FILE", "", "PEM client certificate for mutual TLS with the brokers (with KAFKA_TLS_KEY_FILE)"},
	{"KAFKA_TLS_KEY_FILE", "", "PEM private key of KAFKA_TLS_CERT_FILE"},
	{"KAFKA_SASL_MECHANISM", "", "SASL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with KAFKA_TLS=true: SASL_SSL); empty ⇒ no SASL"},
	{"KAFKA_SASL_USERNAME", "", "SASL user"},
	{"KAFKA_SASL_PASSWORD", "", "SASL password (usually KAFKA_SASL_PASSWORD_FILE)"},
	{"ADMIN_TOKEN", "", "bearer token of the admin API; empty ⇒ admin API off"},
	{"WORKER_BATCH_SIZE", "500", "max messages per worker transaction"},
	{"WORKER_BATCH_WAIT", "5ms", "how long a started batch waits for more messages"},
	{"WORKER_LAG_INTERVAL", "2s", "how often a worker reads its group's total consumer lag from the broker (the lag gauge)"},
	{"METRICS_ADDR", ":9090", "/metrics listener of a process without the gateway"},
	{"GOGC", "200", "Go's garbage-collector target (the runtime reads it); orderpipe's default is 200, Go's own is 100; `off` or a percentage"},
	{"PPROF_ADDR", "", "serve Go's net/http/pprof profiles on this address (keep it private); empty ⇒ off"},
	{"RATE_LIMIT_USER_RPS", "5", "order requests per second per user and gateway (0 ⇒ off)"},
	{"RATE_LIMIT_USER_BURST", "10", "burst of the per-user limit"},
	{"RATE_LIMIT_GLOBAL_RPS", "0", "order requests per second per gateway (0 ⇒ off)"},
	{"API_TOKENS", "", "comma-separated bearer tokens the order API requires; empty ⇒ open"},
	{"ADMIN_ADDR", "", "serve the admin API on this address instead of HTTP_ADDR"},
	{"BREAKER_OPEN_FOR", "2s", "how long a tripped circuit breaker refuses calls before probing"},
	{"REDIS_TIMEOUT", "1s", "bound on one Redis call (dial, read, write) and on a reserve call's wait for a pipeline"},
	{"REDIS_WAIT_REPLICAS", "0", "each reserve waits (WAIT, on its connection) until this many Redis replicas have its writes before the event is produced; fewer within REDIS_WAIT_TIMEOUT ⇒ the reservation is given back and 503 answered, and a retry is shown its orderNo only once a replica has it: a failover can then lose no 202's dedup record. 0 ⇒ off; not on Redis Cluster"},
	{"REDIS_WAIT_TIMEOUT", "50ms", "how long a reserve waits for REDIS_WAIT_REPLICAS replicas (at least 1ms, below REDIS_TIMEOUT)"},
	{"PRODUCE_TIMEOUT", "3s", "bound on one produce before the reservation is released and 503 answered"},
	{"REPLAY_WAIT", "2s", "how long (at most PRODUCE_TIMEOUT) a retry waits for its first attempt's event to be acknowledged by Kafka before answering 503 (a retry is shown the orderNo only once it is durable)"},
	{"REDRIVE_AFTER", "30s", "journal entries older than this that no worker decided are re-published"},
	{"REDRIVE_INTERVAL", "5s", "pause between redrive passes (one worker replica redrives at a time)"},
	{"RECONCILE_INTERVAL", "1m", "reconciler loop period (without --once)"},
	{"MOVE_INTERVAL", "100ms", "pause between the passes of the mover, which moves stock into an empty bucket of a bucketed item (runs with the worker)"},
	{"CLOSE_AFTER", "30m", "unpaid orders close after this Go duration (database clock)"},
	{"CLOSER_INTERVAL", "2s", "pause between closer passes"},
	{"RELAY_INTERVAL", "200ms", "pause between the relay's passes over the orders.status outbox once it is drained (doubles after a failure, up to 5s)"},
	{"RELAY_BATCH_SIZE", "500", "max orders.status events per relay transaction and produce"},
	{"STATUS_RETENTION", "168h", "published orders.status outbox rows (order_events) are deleted after this Go duration; unpublished ones never are"},
	{"TRACE_STORE_DIR", "", "append every span to JSON-lines files in this directory, for `orderpipe locate` (local runs); empty ⇒ off"},
	{"DEV_CLOCK_OFFSET_FILE", "", "development builds only (the chaos suite's clock steps): a file holding a duration (-90s, +3h) added to this process's wall clock (reservedAt, order numbers, the redrive's ages, the reconciler's report time), re-read every 100 ms; the sale window goes by Redis's clock and the closer by the database's, so neither moves; a production build refuses to start with it set"},
	{"TRACE_QUERY_URL", "", "Jaeger query service (e.g. http://jaeger:16686) `orderpipe locate` reads a request's span tree from (GET /api/traces/{id}); takes precedence over TRACE_STORE_DIR; empty ⇒ not read"},
	// Read by pkg/telemetry (the logger exists before the configuration); declared here so `orderpipe env` lists it.
	{"LOG_LEVEL", "info", "debug for more (any other value means info)"},
}

// getenv is the variable's value, else the content of the file that
// NAME_FILE names (how Docker and Kubernetes secrets arrive, so a secret is
// never in the environment or an image), else its default.
func getenv(name string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	if v, ok, _ := fromFile(name); ok {
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
	floatVar := func(name string) float64 {
		f, err := strconv.ParseFloat(getenv(name), 64)
		if err != nil || f < 0 {
			errs = append(errs, fmt.Sprintf("%s: want a non-negative number, got %q", name, getenv(name)))
		}
		return f
	}
	durVar := func(name string) time.Duration {
		d, err := time.ParseDuration(getenv(name))
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Sprintf("%s: want a positive Go duration such as 30s, got %q", name, getenv(name)))
		}
		return d
	}
	c := config{
		HTTPAddr:        getenv("HTTP_ADDR"),
		DatabaseURL:     getenv("DATABASE_URL"),
		DBMaxConns:      intVar("DB_MAX_CONNS"),
		RedisAddr:       getenv("REDIS_ADDR"),
		RedisURL:        getenv("REDIS_URL"),
		RedisUsername:   getenv("REDIS_USERNAME"),
		RedisPassword:   getenv("REDIS_PASSWORD"),
		RedisTLSCA:      getenv("REDIS_TLS_CA_FILE"),
		RedisTLSCert:    getenv("REDIS_TLS_CERT_FILE"),
		RedisTLSKey:     getenv("REDIS_TLS_KEY_FILE"),
		RedisPrefix:     getenv("REDIS_KEY_PREFIX"),
		KafkaBrokers:    event.ParseBrokers(getenv("KAFKA_BROKERS")),
		KafkaPort:       intVar("KAFKA_EMBEDDED_PORT"),
		KafkaAdvPort:    intVar("KAFKA_EMBEDDED_ADVERTISED_PORT"),
		KafkaDir:        getenv("KAFKA_EMBEDDED_DIR"),
		KafkaRetainMB:   intVar("KAFKA_EMBEDDED_RETENTION_MB"),
		KafkaDLQMB:      intVar("KAFKA_EMBEDDED_DLQ_RETENTION_MB"),
		KafkaTopic:      getenv("KAFKA_TOPIC"),
		KafkaDLQTopic:   getenv("KAFKA_DLQ_TOPIC"),
		KafkaGroup:      getenv("KAFKA_GROUP"),
		KafkaParts:      intVar("KAFKA_PARTITIONS"),
		KafkaRF:         intVar("KAFKA_REPLICATION_FACTOR"),
		KafkaBatchWait:  durVar("KAFKA_BATCH_TIMEOUT"),
		GatewayProducer: getenv("GATEWAY_PRODUCER"),
		AdminToken:      getenv("ADMIN_TOKEN"),
		ClockFile:       getenv("DEV_CLOCK_OFFSET_FILE"),
		BatchSize:       intVar("WORKER_BATCH_SIZE"),
		BatchWait:       durVar("WORKER_BATCH_WAIT"),
		LagInterval:     durVar("WORKER_LAG_INTERVAL"),
		ProduceTimeout:  durVar("PRODUCE_TIMEOUT"),
		ReplayWait:      durVar("REPLAY_WAIT"),
		MetricsAddr:     getenv("METRICS_ADDR"),
		PprofAddr:       getenv("PPROF_ADDR"),

		RedriveAfter:      durVar("REDRIVE_AFTER"),
		RedriveInterval:   durVar("REDRIVE_INTERVAL"),
		ReconcileInterval: durVar("RECONCILE_INTERVAL"),
		MoveInterval:      durVar("MOVE_INTERVAL"),

		UserRPS:        floatVar("RATE_LIMIT_USER_RPS"),
		UserBurst:      intVar("RATE_LIMIT_USER_BURST"),
		GlobalRPS:      floatVar("RATE_LIMIT_GLOBAL_RPS"),
		APITokens:      event.ParseBrokers(getenv("API_TOKENS")),
		AdminAddr:      getenv("ADMIN_ADDR"),
		BreakerOpenFor: durVar("BREAKER_OPEN_FOR"),
		RedisTimeout:   durVar("REDIS_TIMEOUT"),
		RedisWait:      stock.ReplicaWait{Replicas: intVar("REDIS_WAIT_REPLICAS"), Timeout: durVar("REDIS_WAIT_TIMEOUT")},
		CloseAfter:     durVar("CLOSE_AFTER"),
		CloserInterval: durVar("CLOSER_INTERVAL"),

		KafkaStatusTopic: getenv("KAFKA_STATUS_TOPIC"),
		RelayInterval:    durVar("RELAY_INTERVAL"),
		RelayBatchSize:   intVar("RELAY_BATCH_SIZE"),
		StatusRetention:  durVar("STATUS_RETENTION"),
		TraceStoreDir:    getenv("TRACE_STORE_DIR"),
		TraceQueryURL:    getenv("TRACE_QUERY_URL"),
	}
	if g := getenv("GOGC"); g != "off" {
		if n, err := strconv.Atoi(g); err != nil || n < 0 {
			errs = append(errs, fmt.Sprintf("GOGC: want off or a non-negative percentage, got %q", g))
		} else {
			c.GCPercent = n
		}
	} else {
		c.GCPercent = -1
	}
	kafkaTLS, err := strconv.ParseBool(getenv("KAFKA_TLS"))
	if err != nil {
		errs = append(errs, fmt.Sprintf("KAFKA_TLS: want true or false, got %q", getenv("KAFKA_TLS")))
	}
	c.kafkaSASLPass = getenv("KAFKA_SASL_PASSWORD")
	c.KafkaSecurity, err = event.SecurityConfig{TLS: kafkaTLS, CAFile: getenv("KAFKA_TLS_CA_FILE"), CertFile: getenv("KAFKA_TLS_CERT_FILE"),
		KeyFile: getenv("KAFKA_TLS_KEY_FILE"), Mechanism: getenv("KAFKA_SASL_MECHANISM"), Username: getenv("KAFKA_SASL_USERNAME"),
		Password: c.kafkaSASLPass}.Load()
	if err != nil {
		errs = append(errs, err.Error())
	}
	if c.GatewayProducer != "group" && c.GatewayProducer != "writer" {
		errs = append(errs, fmt.Sprintf("GATEWAY_PRODUCER: want group or writer, got %q", c.GatewayProducer))
	}
	if c.RelayBatchSize == 0 {
		errs = append(errs, "RELAY_BATCH_SIZE: want at least 1")
	}
	if c.KafkaParts == 0 {
		errs = append(errs, "KAFKA_PARTITIONS: want at least 1")
	}
	if c.KafkaRF < 1 {
		errs = append(errs, "KAFKA_REPLICATION_FACTOR: want at least 1")
	}
	for _, e := range envVars {
		if _, _, err := fromFile(e[0]); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if u, err := url.Parse(c.TraceQueryURL); c.TraceQueryURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		errs = append(errs, "TRACE_QUERY_URL: want the Jaeger query service's http(s) URL, such as http://jaeger:16686")
	}
	if w := c.RedisWait; w.Replicas > 0 && (w.Timeout < time.Millisecond || w.Timeout >= c.RedisTimeout) {
		// WAIT counts in milliseconds (0 would block for ever), and the
		// pipeline's read must outlast it.
		errs = append(errs, fmt.Sprintf("REDIS_WAIT_TIMEOUT: want at least 1ms and below REDIS_TIMEOUT (%s), got %s", c.RedisTimeout, w.Timeout))
	}
	if c.RedisURL != "" && envSet("REDIS_ADDR") {
		errs = append(errs, "REDIS_URL and REDIS_ADDR are both set: set one")
	} else if err := c.redis().Check(); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return config{}, fmt.Errorf("bad configuration:\n  %s", strings.Join(errs, "\n  "))
	}
	registerSecrets(c)
	return c, nil
}

// registerSecrets hands every secret of the configuration to package
// secret, whose log handler and writers mask them wherever they would
// appear (an error a library formatted, a report): the code already never
// formats one, this is the net under that rule.
func registerSecrets(c config) {
	secret.Register(secret.URLPassword(c.DatabaseURL)...)
	secret.Register(c.AdminToken)
	secret.Register(c.APITokens...)
	secret.Register(c.redis().Passwords()...)
	secret.Register(c.kafkaSASLPass)
	secret.Register(secret.URLPassword(c.TraceQueryURL)...)
}

// redis is where Redis is and how to log in; every component and command
// builds its client from it (redisconn.Config.New).
func (c config) redis() redisconn.Config {
	return redisconn.Config{URL: c.RedisURL, Addr: c.RedisAddr, Username: c.RedisUsername, Password: c.RedisPassword,
		CAFile: c.RedisTLSCA, CertFile: c.RedisTLSCert, KeyFile: c.RedisTLSKey, Timeout: c.RedisTimeout}
}

// fromFile reads the file NAME_FILE names, without the trailing newline
// secret files usually end with. Setting both NAME and NAME_FILE is an error.
func fromFile(name string) (string, bool, error) {
	path, ok := os.LookupEnv(name + "_FILE")
	if !ok || path == "" {
		return "", false, nil
	}
	if _, both := os.LookupEnv(name); both {
		return "", false, fmt.Errorf("%s and %s_FILE are both set: set one", name, name)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false, fmt.Errorf("%s_FILE: %w", name, err)
	}
	return strings.TrimRight(string(b), "\r\n"), true, nil
}

// envSet reports whether name is given, directly or as NAME_FILE.
func envSet(name string) bool {
	_, ok := os.LookupEnv(name)
	return ok || os.Getenv(name+"_FILE") != ""
}
