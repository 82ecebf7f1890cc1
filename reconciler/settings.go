package reconciler

import "orderpipe/pkg/setting"

var intervalVar = setting.Var{Name: "RECONCILE_INTERVAL", Default: "1m", Help: "reconciler loop period (without --once)"}

// Settings are the reconciler's environment variables.
var Settings = []setting.Var{intervalVar}
