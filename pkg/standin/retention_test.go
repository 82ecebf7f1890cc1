package standin

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestRetentionNeverDeletesWhatTheGroupHasNotCommitted produces far past the
// budget of a guarded topic and an unguarded one, lets a real consumer
// group (kafka-go, as the worker) commit part of the guarded topic, and
// checks after each retention pass that records below the committed offset
// are deleted, every record at or above it is still there and readable, a
// partition the group never committed on keeps everything, and the
// unguarded topic is cut to its budget.
func TestRetentionNeverDeletesWhatTheGroupHasNotCommitted(t *testing.T) {
	t.Parallel()
	const (
		orders, dlq, group = "orders", "orders.dlq", "workers"
		budget             = 64 << 10 // per topic: 32 KiB per partition
		slack              = 12 << 10 // one batch of 10 records more
		n                  = 3000     // records per partition, ~1 KiB each: 3 MiB, three 1 MiB segments
	)
	// Interval only turns the retention on: the test runs each pass
	// itself (Trim), so what it checks is what one pass did.
	k, err := StartKafka(KafkaOptions{Partitions: 2, Topics: []string{orders, dlq},
		Retention: Retention{Bytes: map[string]int64{orders: budget, dlq: budget}, Guard: map[string]string{orders: group},
			Interval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pad := bytes.Repeat([]byte("x"), 1000)
	for _, topic := range []string{orders, dlq} {
		// Batches of 10 records (~10 KiB): the broker deletes whole
		// batches, so a batch is the precision of the budget.
		w := &kafka.Writer{Addr: kafka.TCP(k.Brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchSize: 10,
			BatchTimeout: time.Millisecond,
			Balancer:     kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return m.Partition })}
		for p := range 2 {
			msgs := make([]kafka.Message, n)
			for i := range msgs {
				msgs[i] = kafka.Message{Partition: p, Value: fmt.Appendf(append([]byte(nil), pad...), "%d", i)}
			}
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
	}
	info := func(topic string, p int32) (start, end, size int64) {
		t.Helper()
		pi := k.Cluster.PartitionInfo(topic, p)
		if pi == nil {
			t.Fatalf("%s/%d: no partition", topic, p)
		}
		return pi.LogStartOffset, pi.HighWatermark, pi.NumBytes
	}
	for _, topic := range []string{orders, dlq} {
		for p := range int32(2) {
			if start, end, _ := info(topic, p); start != 0 || end != n {
				t.Fatalf("%s/%d holds [%d, %d), want [0, %d)", topic, p, start, end, n)
			}
		}
	}

	// Nothing committed yet: the guarded topic keeps all of it.
	if _, err := k.Trim(); err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		if start, _, _ := info(orders, p); start != 0 {
			t.Errorf("%s/%d: records from %d deleted before the group committed anything", orders, p, start)
		}
	}
	// The unguarded topic is cut to about its budget.
	for p := range int32(2) {
		start, end, size := info(dlq, p)
		if start == 0 || size > budget/2+slack || end != n {
			t.Errorf("%s/%d after a pass: [%d, %d), %d bytes; want the oldest deleted and about %d bytes kept", dlq, p, start, end, size, budget/2)
		}
		if kept := end - start; kept < budget/2/1100 {
			t.Errorf("%s/%d keeps %d records, fewer than its %d-byte budget holds", dlq, p, kept, budget/2)
		}
	}

	// The group commits 1000 records of partition 0 and none of partition 1.
	const committed = 1000
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Brokers, GroupID: group, Topic: orders, StartOffset: kafka.FirstOffset,
		MaxWait: 50 * time.Millisecond, JoinGroupBackoff: 100 * time.Millisecond})
	got := 0
	for got < committed {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetching: %v", err)
		}
		if m.Partition != 0 {
			continue // read, never committed
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
		got++
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := k.Trim()
	if err != nil {
		t.Fatal(err)
	}
	if start, end, _ := info(orders, 0); start != committed || end != n {
		t.Errorf("%s/0 after the group committed %d: holds [%d, %d), want [%d, %d): deleted exactly what was committed",
			orders, committed, start, end, committed, n)
	}
	if start, _, _ := info(orders, 1); start != 0 {
		t.Errorf("%s/1: records from %d deleted though the group committed nothing there", orders, start)
	}
	if res.Held != 2 {
		t.Errorf("pass reports %d partitions held over budget by the group, want 2: %+v", res.Held, res)
	}
	// Every uncommitted record is still there, in order, from the committed offset on.
	pr := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Brokers, Topic: orders, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer pr.Close()
	if err := pr.SetOffset(committed); err != nil {
		t.Fatal(err)
	}
	for i := committed; i < n; i++ {
		m, err := pr.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("reading offset %d: %v", i, err)
		}
		if want := fmt.Sprint(i); m.Offset != int64(i) || !bytes.Equal(m.Value[len(pad):], []byte(want)) {
			t.Fatalf("offset %d holds offset %d value %q, want record %s", i, m.Offset, m.Value[len(pad):], want)
		}
	}

	// Once the group has committed everything, the guarded topic too is cut to its budget, not below.
	r = kafka.NewReader(kafka.ReaderConfig{Brokers: k.Brokers, GroupID: group, Topic: orders, StartOffset: kafka.FirstOffset,
		MaxWait: 50 * time.Millisecond, JoinGroupBackoff: 100 * time.Millisecond})
	var batch []kafka.Message
	for left := 2*n - committed; left > 0; left-- {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetching: %v", err)
		}
		if batch = append(batch, m); len(batch) == 500 || left == 1 {
			if err := r.CommitMessages(ctx, batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Trim(); err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		start, end, size := info(orders, p)
		if start <= committed || size > budget/2+slack || end-start < budget/2/1100 {
			t.Errorf("%s/%d after everything was committed: [%d, %d), %d bytes; want about %d bytes kept", orders, p, start, end, size, budget/2)
		}
	}
}
