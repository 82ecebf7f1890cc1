package standin

import "orderpipe/pkg/setting"

// Settings are the embedded broker's environment variables; like the
// broker, they exist only in development builds (nothing else imports this
// package).
var Settings = []setting.Var{
	{Name: "KAFKA_EMBEDDED_PORT", Default: "9092", Help: "port of the embedded broker (127.0.0.1)"},
	{Name: "KAFKA_EMBEDDED_ADVERTISED_PORT", Default: "0", Help: "port on 127.0.0.1 the embedded broker names to clients instead of its own (a proxy in front of it); 0 ⇒ its own"},
	{Name: "KAFKA_EMBEDDED_DIR", Default: "", Help: "data directory of the embedded broker (messages and group offsets survive a restart); empty ⇒ in memory"},
	{Name: "KAFKA_EMBEDDED_RETENTION_MB", Default: "16", Help: "the embedded broker keeps about this many MiB of KAFKA_TOPIC's history that KAFKA_GROUP has committed (what the worker has not committed is always kept), and as many of the newest orders.status events (KAFKA_STATUS_TOPIC); 0 ⇒ keep everything"},
	{Name: "KAFKA_EMBEDDED_MEMORY_LIMIT_MB", Default: "200", Help: "Go's soft memory limit (runtime/debug.SetMemoryLimit) of a process that runs the embedded broker (`all` without KAFKA_BROKERS, as make run does, and `kafka`), so the GOGC headroom over the broker's retained events stays bounded; GOMEMLIMIT, when set, wins; 0 ⇒ none"},
	{Name: "KAFKA_EMBEDDED_DLQ_RETENTION_MB", Default: "64", Help: "the embedded broker keeps about this many MiB of the newest dead letters (KAFKA_DLQ_TOPIC); 0 ⇒ keep every one"},
}
