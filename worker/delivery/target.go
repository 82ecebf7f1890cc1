package delivery

import "orderpipe/pkg/target"

// Start is the webhook target: it delivers the orders.status outbox to
// WEBHOOK_URLS on the process's connections; with none configured it
// starts nothing.
func Start(p *target.Process, cfg Config) (stop func(), err error) {
	log := p.Log.With("component", "webhook")
	if len(cfg.Endpoints) == 0 {
		log.Debug("no WEBHOOK_URLS: no webhooks delivered")
		return func() {}, nil
	}
	d := New(cfg, Deps{Orders: p.Orders, Metrics: p.Metrics, Log: log})
	p.Go("webhook", d.Run)
	return func() {}, nil
}
