package breaker

import "orderpipe/pkg/setting"

// OpenForVar is BREAKER_OPEN_FOR, the default of Settings.OpenFor.
var OpenForVar = setting.Var{Name: "BREAKER_OPEN_FOR", Default: "2s",
	Help: "how long a tripped circuit breaker refuses calls before probing"}
