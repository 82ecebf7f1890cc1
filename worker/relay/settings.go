package relay

import "orderpipe/pkg/setting"

var (
	intervalVar  = setting.Var{Name: "RELAY_INTERVAL", Default: "200ms", Help: "pause between the relay's passes over the orders.status outbox once it is drained (doubles after a failure, up to 5s)"}
	batchSizeVar = setting.Var{Name: "RELAY_BATCH_SIZE", Default: "500", Help: "max orders.status events per relay transaction and produce"}
	retentionVar = setting.Var{Name: "STATUS_RETENTION", Default: "168h", Help: "published orders.status outbox rows (order_events) are deleted after this Go duration; unpublished ones never are"}
)

// Settings are the relay's environment variables.
var Settings = []setting.Var{intervalVar, batchSizeVar, retentionVar}

// Read is the relay's Config as its settings describe it; the topic Start
// adds (KAFKA_STATUS_TOPIC).
func Read(r *setting.Reader) Config {
	c := Config{Interval: r.Duration("RELAY_INTERVAL"), BatchSize: r.Int("RELAY_BATCH_SIZE"), Retention: r.Duration("STATUS_RETENTION")}
	if c.BatchSize == 0 {
		r.Fail("RELAY_BATCH_SIZE: want at least 1")
	}
	return c
}

// Usage is `orderpipe relay --help`.
const Usage = `usage: orderpipe relay

Publishes the outbox of orders.status (the order_events rows every change of
an order writes in its own transaction) to KAFKA_STATUS_TOPIC, keyed by
orderNo, acks=all, each order's events in version order, at least once;
marks them published and deletes published rows after STATUS_RETENTION.
Any number of replicas (FOR UPDATE SKIP LOCKED, one version of an order in
flight at a time). /healthz and /metrics on METRICS_ADDR. Needs
KAFKA_BROKERS and Postgres.
`
