package main

import (
	"strconv"
	"strings"

	"orderpipe/closer"
	"orderpipe/gateway"
	"orderpipe/pkg/breaker"
	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/secret"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/target"
	"orderpipe/pkg/telemetry"
	"orderpipe/reconciler"
	"orderpipe/reconciler/locate"
	"orderpipe/worker"
	"orderpipe/worker/delivery"
	"orderpipe/worker/relay"
)

// settings is every environment variable the binary reads, in the order
// `orderpipe env` lists them: each package declares its own beside its
// Config; the development build adds its own (devSettings). docs/config.md's
// table mirrors this list (TestConfigDocDocumentsEveryVariable).
func settings() []setting.Var {
	return concat(database.Settings, redisconn.Settings, stock.Settings, event.Settings, devSettings(),
		gateway.Settings, []setting.Var{breaker.OpenForVar}, worker.Settings, closer.Settings, relay.Settings, delivery.Settings, reconciler.Settings,
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

// config is the settings the targets are wired from (targets.go): what
// they share, then each component's own Config, each read by its package.
type config struct {
	target.Shared
	Gateway    gateway.Config
	Worker     worker.TargetConfig
	Closer     closer.Config
	Relay      relay.Config
	Webhook    delivery.Config
	Reconciler reconciler.Config
	// TraceQueryURL is read by `locate`; here it is checked and its
	// password kept out of every output.
	TraceQueryURL string
	GCPercent     int       // GOGC; -1 ⇒ off
	dev           devConfig // what only the development build reads (standin.go)
}

// getenv is the value of a declared variable (setting.Lookup).
var getenv = setting.Lookup(settings())

// loadConfig reads and checks every setting, so a bad one stops any command
// before it touches anything, whichever component reads it.
func loadConfig() (config, error) {
	r := &setting.Reader{Env: getenv}
	c := config{Shared: target.Shared{Database: database.Read(r), Redis: redisconn.ReadChecked(r)}}
	c.Stock, c.Kafka, c.dev = stock.Read(r, c.Redis.Timeout), event.Read(r), readDev(r)
	c.Gateway, c.BreakerOpenFor = gateway.Read(r), r.Duration(breaker.OpenForVar.Name)
	c.Worker, c.Closer, c.Relay, c.Reconciler = worker.Read(r), closer.Read(r), relay.Read(r), reconciler.Read(r)
	c.Webhook = delivery.Read(r)
	c.Telemetry, c.TraceQueryURL = telemetry.Read(r), locate.ReadTraceQueryURL(r)
	if g := r.String("GOGC"); g == "off" {
		c.GCPercent = -1
	} else if n, err := strconv.Atoi(g); err != nil || n < 0 {
		r.Fail("GOGC: want off or a non-negative percentage, got %q", g)
	} else {
		c.GCPercent = n
	}
	for _, e := range setting.Check(settings()) {
		r.Fail("%s", e)
	}
	if err := r.Err(); err != nil {
		return config{}, err
	}
	// Package secret's log handler and writers mask these wherever they
	// would appear (an error a library formatted, a report): the code
	// already never formats one, this is the net under that rule.
	secret.Register(secret.URLPassword(c.Database.URL)...)
	secret.Register(c.Gateway.AdminToken)
	secret.Register(c.Gateway.APITokens...)
	secret.Register(c.Redis.Passwords()...)
	secret.Register(getenv("KAFKA_SASL_PASSWORD"))
	secret.Register(secret.URLPassword(c.TraceQueryURL)...)
	secret.Register(c.Kafka.SigningKey)
	// The webhook secret as set and its key part; an endpoint's URL may
	// carry credentials (userinfo, a token in the query).
	if raw := getenv("WEBHOOK_SECRET"); raw != "" {
		secret.Register(raw, strings.TrimPrefix(raw, "whsec_"))
	}
	for _, ep := range c.Webhook.Endpoints {
		secret.Register(ep.Secrets()...)
	}
	event.SetSigningKey(c.Kafka.SigningKey)
	return c, nil
}
