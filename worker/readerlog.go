package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// readerWarnAfter is how long the reader may meet one temporary Kafka error
// before it is a warning.
const readerWarnAfter = 30 * time.Second

// readerLog is the Kafka reader's error logger. kafka-go retries whatever it
// logs. An error with a temporary Kafka code (a partition's leader or the
// group's coordinator not ready yet, as on a fresh topic or a fresh cluster,
// or while a broker restarts) is logged at INFO until the same code has
// kept coming back for warnAfter, then at WARN with how long it has lasted:
// a cluster settling is not for an operator, a stall is. Any other error is
// a warning at once.
type readerLog struct {
	log       *slog.Logger
	warnAfter time.Duration
	now       func() time.Time

	mu    sync.Mutex
	since map[kafka.Error]time.Time // when the code's unbroken run began
	last  map[kafka.Error]time.Time // when the code was last logged
}

func newReaderLog(log *slog.Logger) *readerLog {
	return &readerLog{log: log, warnAfter: readerWarnAfter, now: time.Now,
		since: map[kafka.Error]time.Time{}, last: map[kafka.Error]time.Time{}}
}

// Printf is kafka.Logger's method.
func (l *readerLog) Printf(format string, args ...any) {
	msg := "kafka reader: " + fmt.Sprintf(format, args...)
	code, ok := temporaryCode(args)
	if !ok {
		l.log.Warn(msg)
		return
	}
	now := l.now()
	l.mu.Lock()
	// A code not seen for warnAfter starts a new run.
	if last, seen := l.last[code]; !seen || now.Sub(last) > l.warnAfter {
		l.since[code] = now
	}
	l.last[code] = now
	lasting := now.Sub(l.since[code])
	l.mu.Unlock()
	if lasting >= l.warnAfter {
		l.log.Warn(msg, "lasting", lasting.Round(time.Second))
		return
	}
	l.log.Info(msg, "retrying", true)
}

// temporaryCode is the temporary Kafka error code among args, if any.
func temporaryCode(args []any) (kafka.Error, bool) {
	for _, a := range args {
		err, ok := a.(error)
		if !ok {
			continue
		}
		var code kafka.Error
		if errors.As(err, &code) && code.Temporary() {
			return code, true
		}
	}
	return 0, false
}
