package reconciler

import "orderpipe/pkg/target"

// Start is the reconciler target: its loop (RECONCILE_INTERVAL) beside the
// other targets of a process; `orderpipe reconciler` alone is Main (its
// flags, reports and exit codes).
func Start(p *target.Process, cfg Config) (stop func(), err error) {
	rec := New(cfg, Deps{Orders: p.Orders, Stock: p.Stock, Locker: p.Locker(), Metrics: p.Metrics,
		Log: p.Log.With("component", "reconciler")})
	p.Go("reconciler", rec.Run)
	return func() {}, nil
}
