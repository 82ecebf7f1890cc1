package reconciler

import "orderpipe/pkg/setting"

var (
	intervalVar = setting.Var{Name: "RECONCILE_INTERVAL", Default: "1m",
		Help: "reconciler loop period (without --once); with --once as a scheduled job, the schedule's period (the overdue alert reads it)"}
	pushgatewayVar = setting.Var{Name: "PUSHGATEWAY_URL", Default: "",
		Help: "with --once: the Prometheus Pushgateway the pass's metrics are pushed to (job orderpipe-reconciler); empty: none"}
)

// Settings are the reconciler's environment variables.
var Settings = []setting.Var{intervalVar, pushgatewayVar}

// Read is the reconciler's Config as its settings describe it.
func Read(r *setting.Reader) Config { return Config{Interval: r.Duration("RECONCILE_INTERVAL")} }
