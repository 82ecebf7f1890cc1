package closer

import "orderpipe/pkg/setting"

var (
	closeAfterVar = setting.Var{Name: "CLOSE_AFTER", Default: "30m", Help: "unpaid orders close after this Go duration (database clock)"}
	intervalVar   = setting.Var{Name: "CLOSER_INTERVAL", Default: "2s", Help: "pause between closer passes"}
)

// Settings are the closer's environment variables.
var Settings = []setting.Var{closeAfterVar, intervalVar}

// Read is the closer's Config as its settings describe it.
func Read(r *setting.Reader) Config {
	return Config{CloseAfter: r.Duration("CLOSE_AFTER"), Interval: r.Duration("CLOSER_INTERVAL")}
}

// Usage is `orderpipe closer --help`.
const Usage = `usage: orderpipe closer

Closes UNPAID orders older than CLOSE_AFTER every CLOSER_INTERVAL and gives
their stock and the user's chance back in Redis. Any number of replicas
(FOR UPDATE SKIP LOCKED). /healthz and /metrics on METRICS_ADDR. Needs
Postgres and Redis.
`
