package reconciler

import "orderpipe/pkg/setting"

var intervalVar = setting.Var{Name: "RECONCILE_INTERVAL", Default: "1m", Help: "reconciler loop period (without --once)"}

// Settings are the reconciler's environment variables.
var Settings = []setting.Var{intervalVar}

// Read is the reconciler's Config as its settings describe it.
func Read(r *setting.Reader) Config { return Config{Interval: r.Duration("RECONCILE_INTERVAL")} }
