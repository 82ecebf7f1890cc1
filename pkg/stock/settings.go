package stock

import "orderpipe/pkg/setting"

// Settings are the environment variables of the stock store.
var Settings = []setting.Var{
	{Name: "REDIS_KEY_PREFIX", Default: "", Help: "prefix of every Redis key (isolates tenants/tests)"},
	{Name: "REDIS_WAIT_REPLICAS", Default: "0", Help: "each reserve waits (WAIT, on its connection) until this many Redis replicas have its writes before the event is produced; fewer within REDIS_WAIT_TIMEOUT ⇒ the reservation is given back and 503 answered, and a retry is shown its orderNo only once a replica has it: a failover can then lose no 202's dedup record. 0 ⇒ off; not on Redis Cluster"},
	{Name: "REDIS_WAIT_TIMEOUT", Default: "50ms", Help: "how long a reserve waits for REDIS_WAIT_REPLICAS replicas (at least 1ms, below REDIS_TIMEOUT)"},
}
