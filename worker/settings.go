package worker

import (
	"time"

	"orderpipe/pkg/setting"
)

var (
	groupVar           = setting.Var{Name: "KAFKA_GROUP", Default: "orderpipe-worker", Help: "worker consumer group"}
	batchSizeVar       = setting.Var{Name: "WORKER_BATCH_SIZE", Default: "500", Help: "max messages per worker transaction (1 or more)"}
	batchWaitVar       = setting.Var{Name: "WORKER_BATCH_WAIT", Default: "5ms", Help: "how long a started batch waits for more messages"}
	lagIntervalVar     = setting.Var{Name: "WORKER_LAG_INTERVAL", Default: "2s", Help: "how often a worker reads its group's total consumer lag from the broker (the lag gauge)"}
	redriveAfterVar    = setting.Var{Name: "REDRIVE_AFTER", Default: "30s", Help: "journal entries older than this that no worker decided are re-published"}
	redriveIntervalVar = setting.Var{Name: "REDRIVE_INTERVAL", Default: "5s", Help: "pause between redrive passes (one worker replica redrives at a time)"}
	moveIntervalVar    = setting.Var{Name: "MOVE_INTERVAL", Default: "100ms", Help: "pause between the passes of the mover, which moves stock into an empty bucket of a bucketed item (runs with the worker)"}
)

// Settings are the environment variables of the worker, its redrive and
// its mover.
var Settings = []setting.Var{groupVar, batchSizeVar, batchWaitVar, lagIntervalVar, redriveAfterVar, redriveIntervalVar, moveIntervalVar}

// Usage is `orderpipe worker --help`.
const Usage = `usage: orderpipe worker

A member of the consumer group KAFKA_GROUP on KAFKA_TOPIC: one Postgres
transaction per batch, offsets committed after it; also runs the journal
redrive (one replica at a time). /healthz and /metrics on METRICS_ADDR.
Needs KAFKA_BROKERS, Postgres and Redis.
`

// TargetConfig is what the worker target reads from its settings: the
// consumer's, the redrive's and the mover's.
type TargetConfig struct {
	Group                         string        // KAFKA_GROUP
	BatchSize                     int           // WORKER_BATCH_SIZE
	BatchWait, LagInterval        time.Duration // WORKER_BATCH_WAIT, WORKER_LAG_INTERVAL
	RedriveAfter, RedriveInterval time.Duration // REDRIVE_AFTER, REDRIVE_INTERVAL
	MoveInterval                  time.Duration // MOVE_INTERVAL
	// CloseAfter is the closer's CLOSE_AFTER (the root passes it on): the
	// payBy of an UNPAID event.
	CloseAfter time.Duration
}

// Read is the TargetConfig the settings describe.
func Read(r *setting.Reader) TargetConfig {
	if n := r.Int("WORKER_BATCH_SIZE"); n == 0 {
		r.Fail("WORKER_BATCH_SIZE: want 1 or more messages, got 0")
	}
	return TargetConfig{Group: r.String("KAFKA_GROUP"), BatchSize: r.Int("WORKER_BATCH_SIZE"), BatchWait: r.Duration("WORKER_BATCH_WAIT"),
		LagInterval: r.Duration("WORKER_LAG_INTERVAL"), RedriveAfter: r.Duration("REDRIVE_AFTER"),
		RedriveInterval: r.Duration("REDRIVE_INTERVAL"), MoveInterval: r.Duration("MOVE_INTERVAL")}
}
