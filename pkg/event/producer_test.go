package event

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"

	"orderpipe/pkg/testenv"
)

// countingTransport counts the produce requests that go through it.
type countingTransport struct {
	kafka.RoundTripper
	produces atomic.Int64
}

func (c *countingTransport) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	if _, ok := req.(*produceAPI.Request); ok {
		c.produces.Add(1)
	}
	return c.RoundTripper.RoundTrip(ctx, addr, req)
}

// readAll reads every partition of topic from the start to its end offset
// (known once all writes returned), by partition.
func readAll(t *testing.T, brokers []string, topic string, parts int) map[int][]kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := map[int][]kafka.Message{}
	for p := 0; p < parts; p++ {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 100 * time.Millisecond})
		conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p)
		if err != nil {
			t.Fatalf("dialling the leader of %s/%d: %v", topic, p, err)
		}
		last, err := conn.ReadLastOffset()
		conn.Close()
		if err != nil {
			t.Fatalf("end offset of %s/%d: %v", topic, p, err)
		}
		for int64(len(got[p])) < last {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("reading %s/%d after %d of %d messages: %v", topic, p, len(got[p]), last, err)
			}
			got[p] = append(got[p], m)
		}
		r.Close()
	}
	return got
}

// holdsEach checks that the topic's messages carry exactly the values in
// want, each once. A value may be there twice only when a produce request
// was retried (retries > 0): a retry after a timeout, or after "not enough
// replicas after append", may write a batch the broker had already
// written, as kafka-go's Writer's may; the worker's idempotency table makes
// the copy a no-op.
func holdsEach(t *testing.T, topic string, got map[int][]kafka.Message, want map[string]bool, retries int64) {
	t.Helper()
	seen := map[string]int{}
	total := 0
	for _, msgs := range got {
		for _, m := range msgs {
			seen[string(m.Value)]++
			total++
		}
	}
	for v := range want {
		if seen[v] == 0 {
			t.Errorf("topic %s lacks acknowledged message %q", topic, v)
		}
	}
	for v, n := range seen {
		switch {
		case !want[v]:
			t.Errorf("topic %s holds %q, which was not acknowledged", topic, v)
		case n > 1 && retries == 0:
			t.Errorf("topic %s holds %q %d times, and no produce request was retried", topic, v, n)
		}
	}
	if total != len(want) {
		t.Logf("topic %s holds %d messages for %d values: %d produce request(s) were retried", topic, total, len(want), retries)
	}
}

// Many concurrent writers: every message is acknowledged, lands once in the
// partition kafka-go's Writer would choose for its key, one writer's
// messages stay in order, and the writers share produce requests.
func TestProducerGroupCommits(t *testing.T) {
	t.Parallel()
	k := testenv.MustKafka(t)
	topic := fmt.Sprintf("producer-test-%d", time.Now().UnixNano())
	const parts = 3
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := EnsureTopics(ctx, k.Brokers, parts, 0, topic); err != nil {
		t.Fatal(err)
	}
	var batches, batched atomic.Int64
	p := NewProducer(ProducerConfig{Brokers: k.Brokers, Topic: topic,
		OnBatch: func(n int) { batches.Add(1); batched.Add(int64(n)) }})
	ct := &countingTransport{RoundTripper: p.client.Transport}
	p.client.Transport = ct

	const writers, each = 100, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Ten keys, so every partition of three gets some (a key of the gateway's form).
				m := kafka.Message{Key: []byte(fmt.Sprintf("1:%d", w%10)), Value: []byte(fmt.Sprintf("%d/%d", w, i))}
				if err := p.WriteMessages(ctx, m); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("write: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ct.produces.Load(); n >= writers*each {
		t.Errorf("%d produce requests for %d messages: no request carried more than one", n, writers*each)
	} else {
		t.Logf("%d messages in %d produce requests", writers*each, n)
	}

	if batched.Load() != writers*each || batches.Load() > ct.produces.Load() {
		t.Errorf("OnBatch saw %d messages in %d batches (%d produce requests), want %d messages", batched.Load(), batches.Load(),
			ct.produces.Load(), writers*each)
	}
	got := readAll(t, k.Brokers, topic, parts)
	want := map[string]bool{}
	for w := range writers {
		for i := range each {
			want[fmt.Sprintf("%d/%d", w, i)] = true
		}
	}
	holdsEach(t, topic, got, want, ct.produces.Load()-batches.Load())
	ids := []int{0, 1, 2}
	hash := &kafka.Hash{}
	seen := map[string]bool{}
	next := map[int]int{} // writer → its next message index
	for part, msgs := range got {
		for _, m := range msgs {
			if want := hash.Balance(m, ids...); want != part {
				t.Errorf("message %s (key %s) in partition %d, the Writer's hash puts it in %d", m.Value, m.Key, part, want)
			}
			if seen[string(m.Value)] {
				continue // a retried request's copy (holdsEach judged it)
			}
			seen[string(m.Value)] = true
			var w, i int
			if _, err := fmt.Sscanf(string(m.Value), "%d/%d", &w, &i); err != nil {
				t.Fatalf("value %q: %v", m.Value, err)
			}
			if i != next[w] {
				t.Errorf("writer %d: message %d read after %d", w, i, next[w]-1)
			}
			next[w] = i + 1
		}
	}
}

// A topic created just before the producer's first message: the first
// write succeeds (the first order of a new sale's topic is not refused).
func TestProducerFirstWriteToANewTopic(t *testing.T) {
	t.Parallel()
	k := testenv.MustKafka(t)
	for i := range 3 {
		topic := fmt.Sprintf("producer-new-%d-%d", time.Now().UnixNano(), i)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := EnsureTopics(ctx, k.Brokers, 8, 0, topic); err != nil {
			cancel()
			t.Fatal(err)
		}
		p := NewProducer(ProducerConfig{Brokers: k.Brokers, Topic: topic})
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second) // the gateway's PRODUCE_TIMEOUT
		msg := kafka.Message{Key: []byte("1:" + strconv.Itoa(i)), Value: []byte("first")}
		err := p.WriteMessages(pctx, msg)
		pcancel()
		_ = p.Close()
		cancel()
		if err != nil {
			t.Fatalf("first write to the new topic %s: %v", topic, err)
		}
	}
}

// Close waits for what was handed over, and then refuses messages: with
// writes racing Close, each either is acknowledged and in the topic, or
// was refused and is not.
func TestProducerClose(t *testing.T) {
	t.Parallel()
	k := testenv.MustKafka(t)
	topic := fmt.Sprintf("producer-close-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := EnsureTopics(ctx, k.Brokers, 1, 0, topic); err != nil {
		t.Fatal(err)
	}
	var batches atomic.Int64
	p := NewProducer(ProducerConfig{Brokers: k.Brokers, Topic: topic, OnBatch: func(int) { batches.Add(1) }})
	ct := &countingTransport{RoundTripper: p.client.Transport}
	p.client.Transport = ct
	if err := p.WriteMessages(ctx, kafka.Message{Value: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	// Writers write until they are refused; Close comes once some were acknowledged.
	var acked, refused atomic.Int64
	var ackedMu sync.Mutex
	want := map[string]bool{"first": true}
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				v := fmt.Sprintf("%d/%d", w, i)
				switch err := p.WriteMessages(ctx, kafka.Message{Value: []byte(v)}); {
				case err == nil:
					acked.Add(1)
					ackedMu.Lock()
					want[v] = true
					ackedMu.Unlock()
				case errors.Is(err, ErrProducerClosed):
					refused.Add(1)
					return
				default:
					t.Errorf("write racing Close: %v", err)
					return
				}
			}
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "20 acknowledged writes", func() bool { return acked.Load() >= 20 })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := p.WriteMessages(ctx, kafka.Message{Value: []byte("after")}); !errors.Is(err, ErrProducerClosed) {
		t.Fatalf("write after Close: %v, want ErrProducerClosed", err)
	}
	t.Logf("racing Close: %d acknowledged, %d refused", acked.Load(), refused.Load())
	// A refused write is not there, an acknowledged one is.
	holdsEach(t, topic, readAll(t, k.Brokers, topic, 1), want, ct.produces.Load()-batches.Load())
}

// With no broker answering, a write fails when its context ends, not later.
func TestProducerNoBroker(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := NewProducer(ProducerConfig{Brokers: []string{addr}, Topic: "t"})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = p.WriteMessages(ctx, kafka.Message{Value: []byte("x")})
	if err == nil {
		t.Fatal("write without a broker succeeded")
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("write without a broker took %s (its context ended after 300ms)", waited)
	}
}

// The producer retries what kafka-go's Writer retries, and nothing else.
func TestProducerRetriesWhatTheWriterRetries(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{kafka.LeaderNotAvailable, true},
		{kafka.NotLeaderForPartition, true},
		{kafka.NotEnoughReplicas, true},
		{fmt.Errorf("kafka.(*Client).Produce: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("write: %w", syscall.ECONNRESET), true},
		{io.ErrUnexpectedEOF, true},
		{kafka.MessageSizeTooLarge, false},
		{kafka.TopicAuthorizationFailed, false},
		{context.Canceled, false},
		{errors.New("something else"), false},
	} {
		if got := retriable(c.err); got != c.want {
			t.Errorf("retriable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
