package relay

import "orderpipe/pkg/target"

// Start is the relay target: it publishes the orders.status outbox on the
// process's connections.
func Start(p *target.Process, cfg Config) (stop func(), err error) {
	k := p.Cfg.Kafka
	cfg.Topic = k.StatusTopic
	w := k.Writer(k.StatusTopic)
	r := New(cfg, Deps{Orders: p.Orders, Writer: w, Metrics: p.Metrics, Log: p.Log.With("component", "relay")})
	p.Go("relay", r.Run)
	return func() { w.Close() }, nil
}
