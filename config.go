package main

import (
	"strconv"
	"time"

	"orderpipe/closer"
	"orderpipe/gateway"
	"orderpipe/pkg/breaker"
	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/locate"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/relay"
	"orderpipe/pkg/secret"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/reconciler"
	"orderpipe/worker"
)

// settings is every environment variable the binary reads, in the order
// `orderpipe env` lists them: each package declares its own beside its
// Config; the development build adds its own (devSettings). docs/config.md's
// table mirrors this list (TestConfigDocDocumentsEveryVariable).
func settings() []setting.Var {
	return concat(database.Settings, redisconn.Settings, stock.Settings, event.Settings, devSettings(),
		gateway.Settings, []setting.Var{breaker.OpenForVar}, worker.Settings, closer.Settings, relay.Settings, reconciler.Settings,
		telemetry.Settings, locate.Settings, processSettings)
}

// processSettings are the process's own.
var processSettings = []setting.Var{
	{Name: "GOGC", Default: "200", Help: "Go's garbage-collector target (the runtime reads it); orderpipe's default is 200, Go's own is 100; `off` or a percentage"},
}

func concat[T any](lists ...[]T) []T {
	var out []T
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// config is the settings the targets are wired from (targets.go).
type config struct {
	HTTPAddr         string
	DatabaseURL      string
	DBMaxConns       int
	RedisAddr        string
	RedisURL         string
	RedisUsername    string
	RedisPassword    string
	RedisTLSCA       string
	RedisTLSCert     string
	RedisTLSKey      string
	RedisPrefix      string
	KafkaBrokers     []string
	KafkaTopic       string
	KafkaDLQTopic    string
	KafkaStatusTopic string
	KafkaGroup       string
	KafkaParts       int
	KafkaRF          int
	KafkaBatchWait   time.Duration
	// GatewayProducer is "group" (event.Producer) or "writer" (kafka.Writer).
	GatewayProducer string
	KafkaSecurity   event.Security // KAFKA_TLS*, KAFKA_SASL_*
	AdminToken      string
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
	// waits for that many replicas to acknowledge it before the produce,
	// each claim before the worker decides.
	RedisWait      stock.ReplicaWait
	CloseAfter     time.Duration
	CloserInterval time.Duration
	// TraceStoreDir and TraceQueryURL are read by `locate` (and the span
	// store by telemetry); here the URL is checked and its password kept
	// out of every output.
	TraceStoreDir, TraceQueryURL string
	// The relay of orders.status (pkg/relay).
	RelayInterval   time.Duration
	RelayBatchSize  int
	StatusRetention time.Duration
	// dev is what only the development build reads (standin.go).
	dev devConfig
}

// getenv is the value of a declared variable (setting.Lookup).
var getenv = setting.Lookup(settings())

// loadConfig reads and checks every setting, so a bad one stops any command
// before it touches anything, whichever component reads it.
func loadConfig() (config, error) {
	r := &setting.Reader{Env: getenv}
	rc := redisconn.Read(r)
	c := config{
		HTTPAddr:         r.String("HTTP_ADDR"),
		DatabaseURL:      r.String("DATABASE_URL"),
		DBMaxConns:       r.Int("DB_MAX_CONNS"),
		RedisAddr:        rc.Addr,
		RedisURL:         rc.URL,
		RedisUsername:    rc.Username,
		RedisPassword:    rc.Password,
		RedisTLSCA:       rc.CAFile,
		RedisTLSCert:     rc.CertFile,
		RedisTLSKey:      rc.KeyFile,
		RedisTimeout:     rc.Timeout,
		RedisPrefix:      r.String("REDIS_KEY_PREFIX"),
		KafkaBrokers:     r.List("KAFKA_BROKERS"),
		KafkaTopic:       r.String("KAFKA_TOPIC"),
		KafkaDLQTopic:    r.String("KAFKA_DLQ_TOPIC"),
		KafkaStatusTopic: r.String("KAFKA_STATUS_TOPIC"),
		KafkaGroup:       r.String("KAFKA_GROUP"),
		KafkaParts:       r.Int("KAFKA_PARTITIONS"),
		KafkaRF:          r.Int("KAFKA_REPLICATION_FACTOR"),
		KafkaBatchWait:   r.Duration("KAFKA_BATCH_TIMEOUT"),
		KafkaSecurity:    event.ReadSecurity(r),
		GatewayProducer:  r.String("GATEWAY_PRODUCER"),
		AdminToken:       r.String("ADMIN_TOKEN"),
		BatchSize:        r.Int("WORKER_BATCH_SIZE"),
		BatchWait:        r.Duration("WORKER_BATCH_WAIT"),
		LagInterval:      r.Duration("WORKER_LAG_INTERVAL"),
		ProduceTimeout:   r.Duration("PRODUCE_TIMEOUT"),
		ReplayWait:       r.Duration("REPLAY_WAIT"),
		MetricsAddr:      r.String("METRICS_ADDR"),
		PprofAddr:        r.String("PPROF_ADDR"),

		RedriveAfter:      r.Duration("REDRIVE_AFTER"),
		RedriveInterval:   r.Duration("REDRIVE_INTERVAL"),
		ReconcileInterval: r.Duration("RECONCILE_INTERVAL"),
		MoveInterval:      r.Duration("MOVE_INTERVAL"),

		UserRPS:         r.Float("RATE_LIMIT_USER_RPS"),
		UserBurst:       r.Int("RATE_LIMIT_USER_BURST"),
		GlobalRPS:       r.Float("RATE_LIMIT_GLOBAL_RPS"),
		APITokens:       r.List("API_TOKENS"),
		AdminAddr:       r.String("ADMIN_ADDR"),
		BreakerOpenFor:  r.Duration("BREAKER_OPEN_FOR"),
		RedisWait:       stock.ReplicaWait{Replicas: r.Int("REDIS_WAIT_REPLICAS"), Timeout: r.Duration("REDIS_WAIT_TIMEOUT")},
		CloseAfter:      r.Duration("CLOSE_AFTER"),
		CloserInterval:  r.Duration("CLOSER_INTERVAL"),
		TraceStoreDir:   r.String("TRACE_STORE_DIR"),
		TraceQueryURL:   locate.ReadTraceQueryURL(r),
		RelayInterval:   r.Duration("RELAY_INTERVAL"),
		RelayBatchSize:  r.Int("RELAY_BATCH_SIZE"),
		StatusRetention: r.Duration("STATUS_RETENTION"),
		dev:             readDev(r),
	}
	if g := r.String("GOGC"); g == "off" {
		c.GCPercent = -1
	} else if n, err := strconv.Atoi(g); err != nil || n < 0 {
		r.Fail("GOGC: want off or a non-negative percentage, got %q", g)
	} else {
		c.GCPercent = n
	}
	if c.GatewayProducer != "group" && c.GatewayProducer != "writer" {
		r.Fail("GATEWAY_PRODUCER: want group or writer, got %q", c.GatewayProducer)
	}
	if c.RelayBatchSize == 0 {
		r.Fail("RELAY_BATCH_SIZE: want at least 1")
	}
	if c.KafkaParts == 0 {
		r.Fail("KAFKA_PARTITIONS: want at least 1")
	}
	if c.KafkaRF < 1 {
		r.Fail("KAFKA_REPLICATION_FACTOR: want at least 1")
	}
	for _, e := range setting.Check(settings()) {
		r.Fail("%s", e)
	}
	if w := c.RedisWait; w.Replicas > 0 && (w.Timeout < time.Millisecond || w.Timeout >= c.RedisTimeout) {
		// WAIT counts in milliseconds (0 would block for ever), and the
		// pipeline's read must outlast it.
		r.Fail("REDIS_WAIT_TIMEOUT: want at least 1ms and below REDIS_TIMEOUT (%s), got %s", c.RedisTimeout, w.Timeout)
	}
	if c.RedisURL != "" && setting.Set("REDIS_ADDR") {
		r.Fail("REDIS_URL and REDIS_ADDR are both set: set one")
	} else if err := c.redis().Check(); err != nil {
		r.Fail("%s", err.Error())
	}
	if err := r.Err(); err != nil {
		return config{}, err
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
	secret.Register(getenv("KAFKA_SASL_PASSWORD"))
	secret.Register(secret.URLPassword(c.TraceQueryURL)...)
}

// redis is where Redis is and how to log in; every component builds its
// client from it (redisconn.Config.New).
func (c config) redis() redisconn.Config {
	return redisconn.Config{URL: c.RedisURL, Addr: c.RedisAddr, Username: c.RedisUsername, Password: c.RedisPassword,
		CAFile: c.RedisTLSCA, CertFile: c.RedisTLSCert, KeyFile: c.RedisTLSKey, Timeout: c.RedisTimeout}
}
