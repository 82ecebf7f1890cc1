//go:build !dev

package clock

import (
	"context"
	"errors"
	"time"
)

// Watch refuses: a production build reads the real clock only.
func Watch(context.Context, string, time.Duration, func(from, to time.Duration, err error)) error {
	return errors.New("a stepped clock (DEV_CLOCK_OFFSET_FILE) exists only in development builds (-tags dev)")
}
