// Package clock is the wall clock the pipeline stamps and compares absolute
// times with: the gateway's reservedAt, order numbers and sale window, the
// dedup records' expiry, the redrive's age of a journal entry. Durations
// are measured with time.Now's monotonic reading and do not come here.
//
// In development builds (-tags dev) the clock can be stepped: Watch reads
// an offset from a file, the chaos suite's clock-step fault (see
// bench/chaos). A production build reads the real clock only.
package clock

import (
	"sync/atomic"
	"time"
)

// offset is added to the wall clock (nanoseconds); only Watch (dev builds)
// sets it.
var offset atomic.Int64

// Now is the process's wall clock: time.Now, plus the offset a development
// build was stepped by. A stepped reading has no monotonic part, so two
// readings across a step differ as a stepped wall clock would.
func Now() time.Time {
	if off := offset.Load(); off != 0 {
		return time.Now().Round(0).Add(time.Duration(off))
	}
	return time.Now()
}

// Offset is the step currently applied (0 in production builds).
func Offset() time.Duration { return time.Duration(offset.Load()) }
