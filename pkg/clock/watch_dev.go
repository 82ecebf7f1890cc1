//go:build dev

package clock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"orderpipe/pkg/tick"
)

// Watch steps the clock to the duration written in path ("-90s", "+3h";
// empty or missing ⇒ 0), re-read every interval until ctx ends; step hears
// each change. The file is read once before Watch returns, so a process
// starts on a stepped clock; a malformed file is an error then, and later
// keeps the previous offset.
func Watch(ctx context.Context, path string, every time.Duration, step func(from, to time.Duration, err error)) error {
	off, err := read(path)
	if err != nil {
		return err
	}
	offset.Store(int64(off))
	go tick.Every(ctx, every, func() { reread(path, step) })
	return nil
}

// reread steps the clock to the offset now in path, if it changed; a
// malformed file is reported and keeps the previous offset.
func reread(path string, step func(from, to time.Duration, err error)) {
	next, err := read(path)
	prev := Offset()
	if err != nil {
		step(prev, prev, err)
		return
	}
	if next != prev {
		offset.Store(int64(next))
		step(prev, next, nil)
	}
}

func read(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(strings.TrimPrefix(s, "+"))
	if err != nil {
		return 0, fmt.Errorf("clock offset file %s: %w", path, err)
	}
	return d, nil
}
