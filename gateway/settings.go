package gateway

import (
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
)

var (
	addrVar           = setting.Var{Name: "HTTP_ADDR", Default: ":8080", Help: "gateway listen address"}
	produceTimeoutVar = setting.Var{Name: "PRODUCE_TIMEOUT", Default: "3s", Help: "bound on one produce before the reservation is released and 503 answered"}
	verdictTTLVar     = setting.Var{Name: "VERDICT_TTL", Default: "500ms", Help: "how long (at most 1s; 0 ⇒ off) a gateway refuses new order requests for an item from Redis's last refusal of it (sold out, outside the sale window) without running the reserve script: the bound on a unit given back being on sale again on every gateway"}
	replayWaitVar     = setting.Var{Name: "REPLAY_WAIT", Default: "2s", Help: "how long (at most PRODUCE_TIMEOUT) a retry waits for its first attempt's event to be acknowledged by Kafka before answering 503 (a retry is shown the orderNo only once it is durable)"}
)

// Settings are the gateway's environment variables.
var Settings = []setting.Var{
	addrVar,
	{Name: "ADMIN_TOKEN", Default: "", Help: "bearer token of the admin API; empty ⇒ admin API off"},
	{Name: "ADMIN_ADDR", Default: "", Help: "serve the admin API on this address instead of HTTP_ADDR"},
	{Name: "API_TOKENS", Default: "", Help: "comma-separated bearer tokens the order API requires; empty ⇒ open"},
	{Name: "GATEWAY_PRODUCER", Default: "group", Help: "the gateway's producer: group (one produce request in flight per partition, the orders that arrive meanwhile sent together in the next, no linger) or writer (kafka-go's Writer, lingering KAFKA_BATCH_TIMEOUT); both acks=all"},
	{Name: "RATE_LIMIT_USER_RPS", Default: "5", Help: "order requests per second per user and gateway (0 ⇒ off)"},
	{Name: "RATE_LIMIT_USER_BURST", Default: "10", Help: "burst of the per-user limit"},
	{Name: "RATE_LIMIT_GLOBAL_RPS", Default: "0", Help: "order requests per second per gateway (0 ⇒ off)"},
	produceTimeoutVar,
	replayWaitVar,
	verdictTTLVar,
}

// Usage is `orderpipe gateway --help`.
const Usage = `usage: orderpipe gateway

The HTTP service: POST /v1/orders (one reserve script in Redis, one produce
to Kafka), order lookup, pay and cancel, /healthz, /readyz, /metrics and
/openapi.json on HTTP_ADDR; the admin API (with ADMIN_TOKEN) there too, or
on ADMIN_ADDR. Needs KAFKA_BROKERS and Redis; starts without Postgres
(lookup, pay, cancel and the admin API answer 503 until it returns).
`

// Read is the gateway's Config as its settings describe it; what it shares
// with the process (the Redis bound, the breaker, the topic) Start adds.
func Read(r *setting.Reader) Config {
	c := Config{Addr: r.Addr("HTTP_ADDR", true), AdminToken: r.String("ADMIN_TOKEN"), AdminAddr: r.Addr("ADMIN_ADDR", true),
		APITokens: r.List("API_TOKENS"), Producer: r.String("GATEWAY_PRODUCER"), UserRPS: r.Float("RATE_LIMIT_USER_RPS"),
		UserBurst: r.Int("RATE_LIMIT_USER_BURST"), GlobalRPS: r.Float("RATE_LIMIT_GLOBAL_RPS"),
		ProduceTimeout: r.Duration("PRODUCE_TIMEOUT"), ReplayWait: r.Duration("REPLAY_WAIT"),
		VerdictTTL: r.Duration("VERDICT_TTL")}
	if c.VerdictTTL > stock.MaxVerdictTTL {
		r.Fail("VERDICT_TTL: at most %s, got %s", stock.MaxVerdictTTL, c.VerdictTTL)
	}
	if c.VerdictTTL == 0 {
		c.VerdictTTL = -1 // off (a Config's zero is the default)
	}
	if c.Producer != "group" && c.Producer != "writer" {
		r.Fail("GATEWAY_PRODUCER: want group or writer, got %q", c.Producer)
	}
	return c
}
