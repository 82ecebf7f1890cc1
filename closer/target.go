package closer

import "orderpipe/pkg/target"

// Start is the closer target: one closer replica on the process's
// connections.
func Start(p *target.Process, cfg Config) (stop func(), err error) {
	c := New(cfg, Deps{Orders: p.Orders, Stock: p.Stock, Metrics: p.Metrics, Log: p.Log.With("component", "closer")})
	p.Go("closer", c.Run)
	return func() {}, nil
}
