package gateway

import (
	"context"

	"orderpipe/pkg/event"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/target"
	"orderpipe/pkg/telemetry"
)

// Start is the gateway target: the gateway on the process's connections,
// serving until the process stops.
func Start(p *target.Process, cfg Config) (stop func(), err error) {
	k := p.Cfg.Kafka
	cfg.ReserveTimeout, cfg.BreakerOpenFor, cfg.Topic = p.Cfg.Redis.Timeout, p.Cfg.BreakerOpenFor, k.Topic
	producer := newProducer(cfg.Producer, k, p.Metrics)
	gw := New(cfg, Deps{Stock: p.Stock, Orders: p.Orders, Producer: producer, Metrics: p.Metrics, Log: p.Log.With("component", "gateway"),
		Ready: readyChecks(p.Stock, k)})
	p.Go("gateway", func(ctx context.Context) error {
		if p.Listener != nil {
			return gw.Serve(ctx, p.Listener)
		}
		return gw.Run(ctx)
	})
	p.ServesMetrics()
	return func() { producer.Close() }, nil
}

// readyChecks are what /readyz asks: the dependencies of taking an order
// (the reserve script in Redis, the produce to Kafka). Not Postgres:
// accepting an order never touches it (only a NOT_ON_SALE answer is checked
// against it, since Redis may have lost the sale's keys, and is 503 while
// Postgres cannot confirm it), and during a Postgres outage the queue holds
// the accepted orders until the workers catch up, so the gateways must stay
// in service (order lookups, pay, cancel and the admin API answer 503
// meanwhile).
// The other components serve no traffic and have no readiness beyond
// /healthz: each waits for its own dependencies.
func readyChecks(st *stock.Store, k event.Config) map[string]PingFunc {
	return map[string]PingFunc{
		"redis": st.Ping,
		"kafka": func(ctx context.Context) error { return k.Security.Ping(ctx, k.Brokers) },
	}
}

// newProducer is the producer GATEWAY_PRODUCER names.
func newProducer(kind string, k event.Config, m *telemetry.Metrics) interface {
	Producer
	Close() error
} {
	if kind == "writer" {
		return k.Writer(k.Topic)
	}
	return event.NewProducer(event.ProducerConfig{Brokers: k.Brokers, Topic: k.Topic, Security: k.Security,
		OnBatch: func(n int) { m.ProduceBatch.Observe(float64(n)) }})
}
