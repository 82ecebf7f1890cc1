package stock

import (
	"time"

	"orderpipe/pkg/setting"
)

// Settings are the environment variables of the stock store.
var Settings = []setting.Var{
	{Name: "REDIS_KEY_PREFIX", Default: "", Help: "prefix of every Redis key (isolates tenants/tests)"},
	{Name: "REDIS_WAIT_REPLICAS", Default: "0", Help: "each reserve (gateway), each claim and each re-publish (worker) waits (WAIT, on its connection) until this many Redis replicas have its writes: a reserve before the event is produced, a claim before the worker decides the reservation, the redrive before it re-publishes what it read; fewer within REDIS_WAIT_TIMEOUT ⇒ the reservation is given back and 503 answered, or the worker's batch (the redrive's pass) is retried; a retry is shown its orderNo only once a replica has it: a failover can then lose no 202's dedup record nor a claim an order rests on. Set it on gateways and workers alike; 0 ⇒ off; not on Redis Cluster"},
	{Name: "REDIS_WAIT_TIMEOUT", Default: "50ms", Help: "how long a reserve or a claim waits for REDIS_WAIT_REPLICAS replicas (at least 1ms, below REDIS_TIMEOUT)"},
}

// Config is the stock store's settings: the key prefix and the replicas a
// reserve waits for.
type Config struct {
	Prefix string      // REDIS_KEY_PREFIX
	Wait   ReplicaWait // REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT
}

// Read is the Config the settings describe; redisTimeout (REDIS_TIMEOUT)
// bounds the wait.
func Read(r *setting.Reader, redisTimeout time.Duration) Config {
	c := Config{Prefix: r.String("REDIS_KEY_PREFIX"),
		Wait: ReplicaWait{Replicas: r.Int("REDIS_WAIT_REPLICAS"), Timeout: r.Duration("REDIS_WAIT_TIMEOUT")}}
	if w := c.Wait; w.Replicas > 0 && (w.Timeout < time.Millisecond || w.Timeout >= redisTimeout) {
		// WAIT counts in milliseconds (0 would block for ever), and the
		// pipeline's read must outlast it.
		r.Fail("REDIS_WAIT_TIMEOUT: want at least 1ms and below REDIS_TIMEOUT (%s), got %s", redisTimeout, w.Timeout)
	}
	return c
}
