// Package tick is the loop of the periodic passes: the worker's sweep, the
// redrive, the bucket mover, the dev clock's watcher and the stand-ins'
// housekeeping each run one pass every interval until their context ends,
// and this is the one place that loop is written.
package tick

import (
	"context"
	"time"
)

// Every runs pass every d until ctx ends, the first time d after the call.
// A pass in hand is not interrupted: Every returns once it is over and ctx
// has ended.
func Every(ctx context.Context, d time.Duration, pass func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pass()
	}
}
