package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestReaderLogWarnsOnlyWhenATemporaryErrorLasts: a temporary Kafka error
// (a fresh group's coordinator) is INFO while the cluster settles and WARN
// once it has lasted readerWarnAfter; a gap starts a new run; an error that
// is not temporary is a warning at once.
func TestReaderLogWarnsOnlyWhenATemporaryErrorLasts(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	l := newReaderLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	l.now = func() time.Time { return now }
	levels := func() []string {
		t.Helper()
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var rec struct{ Level, Msg string }
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			out = append(out, rec.Level)
		}
		buf.Reset()
		return out
	}
	coordinator := func() {
		l.Printf("Unable to establish connection to consumer group coordinator for group %s: %v", "g", fmt.Errorf("finding: %w", kafka.GroupCoordinatorNotAvailable))
	}

	coordinator()
	now = now.Add(10 * time.Second)
	coordinator()
	now = now.Add(19 * time.Second)
	coordinator()
	if got := levels(); strings.Join(got, " ") != "INFO INFO INFO" {
		t.Fatalf("a coordinator missing for 29 s: levels %v, want INFO ×3", got)
	}
	now = now.Add(2 * time.Second)
	coordinator()
	if got := levels(); strings.Join(got, " ") != "WARN" {
		t.Fatalf("a coordinator missing for 31 s: levels %v, want WARN", got)
	}

	// Quiet for longer than readerWarnAfter: the next one starts a new run.
	now = now.Add(time.Minute)
	coordinator()
	if got := levels(); strings.Join(got, " ") != "INFO" {
		t.Fatalf("after a minute without it: levels %v, want INFO", got)
	}

	l.Printf("the kafka reader got an unknown error reading partition %d of %s at offset %d: %v", 3, "t", 0, errors.New("read tcp: i/o timeout"))
	l.Printf("error initializing the kafka reader for partition %d of %s: %s", 2, "t", kafka.TopicAuthorizationFailed)
	if got := levels(); strings.Join(got, " ") != "WARN WARN" {
		t.Fatalf("errors that are not temporary: levels %v, want WARN ×2", got)
	}
}
