//go:build dev

package clock

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchSteps: the offset in the file steps Now at once (read before
// Watch returns), a new value steps it again and is reported, removing the
// file steps it back, and a malformed value keeps the previous offset.
func TestWatchSteps(t *testing.T) {
	t.Cleanup(func() { offset.Store(0) })
	path := filepath.Join(t.TempDir(), "clock")
	// Written aside and renamed into place, as the chaos suite does: the
	// watcher polling between WriteFile's truncate and its write would read
	// an empty file, which means no offset.
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path+".new", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	write("+3h\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steps := make(chan [2]time.Duration, 8)
	errs := make(chan error, 8)
	if err := Watch(ctx, path, 10*time.Millisecond, func(from, to time.Duration, err error) {
		if err != nil {
			select { // reported every pass while malformed
			case errs <- err:
			default:
			}
			return
		}
		steps <- [2]time.Duration{from, to}
	}); err != nil {
		t.Fatal(err)
	}
	if d := Now().Sub(time.Now()); d < 3*time.Hour-time.Minute || d > 3*time.Hour+time.Minute {
		t.Fatalf("Now is %s from the real clock, want +3h", d)
	}

	write("-90s")
	if s := <-steps; s != [2]time.Duration{3 * time.Hour, -90 * time.Second} {
		t.Fatalf("step %v, want 3h → -90s", s)
	}
	if d := time.Until(Now()); d > -89*time.Second || d < -91*time.Second {
		t.Fatalf("Now is %s from the real clock, want -90s", d)
	}

	write("soon")
	<-errs
	if Offset() != -90*time.Second {
		t.Fatalf("a malformed file changed the offset to %s", Offset())
	}

	os.Remove(path)
	if s := <-steps; s != [2]time.Duration{-90 * time.Second, 0} {
		t.Fatalf("step %v, want -90s → 0", s)
	}
	if d := Now().Sub(time.Now()); d > time.Second || d < -time.Second {
		t.Fatalf("Now is %s from the real clock after the step back", d)
	}
}

// TestWatchRejectsAMalformedFileAtStart: a process is not started on a
// clock it cannot read.
func TestWatchRejectsAMalformedFileAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	if err := os.WriteFile(path, []byte("3 hours"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Watch(context.Background(), path, time.Second, func(time.Duration, time.Duration, error) {}); err == nil {
		t.Fatal("a malformed offset was accepted")
	}
}
