package topic_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/testenv"
	"orderpipe/pkg/topic"
)

// mustTopic is a fresh two-partition topic holding three records on
// partition 0 and two on partition 1 ("p<partition>-<n>" keys, "v..." values).
func mustTopic(t *testing.T) topic.Reader {
	t.Helper()
	ctx := context.Background()
	k := testenv.MustKafka(t)
	name := testenv.UniqueName("topic.")
	if err := event.EnsureTopics(ctx, k.Brokers, 2, 0, name); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(k.Brokers...), Topic: name, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		// The key names the partition, so the test knows where each record is.
		Balancer: kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return int(m.Key[1] - '0') })}
	defer w.Close()
	for _, key := range []string{"p0-0", "p1-0", "p0-1", "p0-2", "p1-1"} {
		err := w.WriteMessages(ctx, kafka.Message{Key: []byte(key), Value: []byte("v" + key),
			Headers: []kafka.Header{{Key: "h", Value: []byte("of " + key)}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	return topic.Reader{Client: &kafka.Client{Addr: kafka.TCP(k.Brokers...), Timeout: 10 * time.Second}, Topic: name}
}

func keysOf(t *testing.T, r topic.Reader, ranges []topic.Bounds) []string {
	t.Helper()
	var got []string
	err := r.Scan(context.Background(), ranges, func(rec topic.Record) error {
		key := string(rec.Key)
		if string(rec.Value) != "v"+key || rec.Header("h") != "of "+key || rec.Time.IsZero() {
			t.Errorf("record %s: value %q, header %q, time %v", rec.Where(), rec.Value, rec.Header("h"), rec.Time)
		}
		if want := fmt.Sprintf("p%d-%d", rec.Partition, rec.Offset); key != want {
			t.Errorf("record at %s is %s, want %s", rec.Where(), key, want)
		}
		got = append(got, key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestReaderPartitionsAndScan: each partition's offsets, and a scan returns
// exactly the records of the ranges asked, in offset order per partition,
// partitions in the order given; a range outside the log holds nothing.
func TestReaderPartitionsAndScan(t *testing.T) {
	t.Parallel()
	r := mustTopic(t)
	parts, err := r.Partitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(parts) != "[{0 0 3} {1 0 2}]" {
		t.Fatalf("partitions %v, want [{0 0 3} {1 0 2}]", parts)
	}
	for _, c := range []struct {
		name   string
		ranges []topic.Bounds
		want   string
	}{
		{"Everything", parts, "p0-0 p0-1 p0-2 p1-0 p1-1"},
		{"PartitionsInTheOrderGiven", []topic.Bounds{parts[1], parts[0]}, "p1-0 p1-1 p0-0 p0-1 p0-2"},
		{"FromAnOffset", []topic.Bounds{{Partition: 0, First: 1, Next: 3}}, "p0-1 p0-2"},
		{"UpToAnOffset", []topic.Bounds{{Partition: 0, First: 0, Next: 2}, {Partition: 1, First: 1, Next: 2}}, "p0-0 p0-1 p1-1"},
		{"OneRecord", []topic.Bounds{{Partition: 0, First: 2, Next: 3}}, "p0-2"},
		{"PastTheEnd", []topic.Bounds{{Partition: 0, First: 5, Next: 9}}, ""},
		{"Empty", []topic.Bounds{{Partition: 1, First: 1, Next: 1}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := strings.Join(keysOf(t, r, c.ranges), " "); got != c.want {
				t.Errorf("scan %v: %q, want %q", c.ranges, got, c.want)
			}
		})
	}
}

// TestReaderScanStopsOnError: fn's error ends the scan and comes back as is.
func TestReaderScanStopsOnError(t *testing.T) {
	t.Parallel()
	r := mustTopic(t)
	parts, err := r.Partitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	n := 0
	err = r.Scan(context.Background(), parts, func(topic.Record) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Errorf("scan: %v after %d records, want stop after 2", err, n)
	}
}

// TestReaderBrokerDown: a broker that is not there is an error, not an
// empty topic.
func TestReaderBrokerDown(t *testing.T) {
	t.Parallel()
	r := topic.Reader{Client: &kafka.Client{Addr: kafka.TCP(testenv.SilentServer(t)), Timeout: 300 * time.Millisecond}, Topic: "t"}
	if parts, err := r.Partitions(context.Background()); err == nil {
		t.Errorf("partitions of a silent broker: %v, want an error", parts)
	}
}
