package closer

import (
	"orderpipe/pkg/order"
	"orderpipe/pkg/setting"
)

var intervalVar = setting.Var{Name: "CLOSER_INTERVAL", Default: "2s", Help: "pause between closer passes"}

// Settings are the closer's environment variables. CLOSE_AFTER is declared
// by pkg/order: the gateway and the worker read it too (an order's payBy).
var Settings = []setting.Var{order.CloseAfterVar, order.CloseGraceVar, intervalVar}

// Read is the closer's Config as its settings describe it.
func Read(r *setting.Reader) Config {
	return Config{CloseAfter: r.Duration("CLOSE_AFTER"), Grace: r.Duration("CLOSE_GRACE"), Interval: r.Duration("CLOSER_INTERVAL")}
}

// Usage is `orderpipe closer --help`.
const Usage = `usage: orderpipe closer

Closes UNPAID orders past their payBy (creation + CLOSE_AFTER) by
more than CLOSE_GRACE every CLOSER_INTERVAL and gives
their stock and the user's chance back in Redis. Any number of replicas
(FOR UPDATE SKIP LOCKED). /healthz and /metrics on METRICS_ADDR. Needs
Postgres and Redis.
`
