package event

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"

	"orderpipe/pkg/setting"
)

// Producer is the gateway's producer: a group commit over kafka-go's Client,
// where kafka-go's Writer lingers. Per partition at most one produce request
// is in flight. A message that finds its partition idle is sent at once; the
// messages that arrive while a request is in flight wait for it and go
// together in the next request, sent the moment the previous one is
// answered. So a batch is as large as the traffic makes it, and no message
// waits for companions that may never come. The Writer instead holds every
// batch for BatchTimeout unless it fills, and sends one partition's batches
// one at a time, so at a few thousand orders a second each order waited up
// to the whole linger (docs/benchmarks.md, "Open loop").
//
// It keeps the Writer's guarantees: acks=all (WriteMessages returns nil only
// once every in-sync replica has the message), kafka-go's Hash balancer over
// the topic's partitions (a key lands where the Writer would put it: one
// item, one partition, in order), a request bounded by its own timeout and
// not by the caller's context (a message that was handed over is sent even
// if its caller stops waiting), and the same retries: a temporary Kafka
// error (a leader moved, not enough replicas yet), a timed-out request or a
// broken connection is retried with backoff. A retry after a timeout may
// write a message twice, as the Writer's may; the worker's idempotency
// table makes the second one a no-op.
type Producer struct {
	client     *kafka.Client
	topic      string
	balancer   kafka.Hash
	timeout    time.Duration
	attempts   int
	backoffMin time.Duration
	backoffMax time.Duration
	maxMsgs    int
	maxBytes   int
	completion func([]kafka.Message, error)
	onBatch    func(n int)

	mu     sync.Mutex
	lanes  map[int]*lane
	ids    []int // 0..n-1 for the balancer, rebuilt when the partition count changes
	closed bool
	wg     sync.WaitGroup // the lanes' senders
}

// lane is one partition's queue.
type lane struct {
	queue   []*batch // not yet sent, oldest first; the last takes new messages until full
	sending bool     // a sender goroutine runs for this lane
}

// batch is one produce request's messages and, once answered, its outcome.
type batch struct {
	msgs  []kafka.Message
	bytes int
	done  chan struct{}
	err   error // set before done is closed
}

// ProducerConfig tunes a Producer.
type ProducerConfig struct {
	Brokers []string
	Topic   string
	// WriteTimeout bounds one produce request (default 2 s).
	WriteTimeout time.Duration
	// MaxAttempts is how often a request is tried (default 3).
	MaxAttempts int
	// MaxBatchMessages and MaxBatchBytes bound one request (defaults 500
	// and 512 KiB, under the broker's default message.max.bytes of 1 MiB).
	MaxBatchMessages int
	MaxBatchBytes    int
	// Security is TLS and SASL (zero: plaintext).
	Security Security
	// OnBatch, if set, is told the size of every produce request before it
	// is sent (the gateway's orderpipe_produce_batch_messages).
	OnBatch func(n int)
}

// NewProducer returns a group-committing producer (see Producer).
func NewProducer(c ProducerConfig) *Producer {
	setting.DefaultTo(&c.WriteTimeout, 2*time.Second)
	setting.DefaultTo(&c.MaxAttempts, 3)
	setting.DefaultTo(&c.MaxBatchMessages, 500)
	setting.DefaultTo(&c.MaxBatchBytes, 512<<10)
	return &Producer{
		client:     &kafka.Client{Addr: kafka.TCP(c.Brokers...), Timeout: c.WriteTimeout, Transport: transport(c.Security)},
		topic:      c.Topic,
		timeout:    c.WriteTimeout,
		attempts:   c.MaxAttempts,
		backoffMin: 20 * time.Millisecond,
		backoffMax: 200 * time.Millisecond,
		maxMsgs:    c.MaxBatchMessages,
		maxBytes:   c.MaxBatchBytes,
		completion: sent.complete,
		onBatch:    c.OnBatch,
		lanes:      map[int]*lane{},
	}
}

// ErrProducerClosed is returned by WriteMessages after Close.
var ErrProducerClosed = errors.New("producer closed")

// WriteMessages sends msgs to the producer's topic and returns once the
// broker has acknowledged all of them (acks=all), or with the first error.
// When ctx ends first it returns ctx's error, and the messages may still
// be written: what was handed over is sent whatever the caller does.
// A message's Topic and Partition are ignored.
func (p *Producer) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed { // checked again below, once the partitions are known
		return ErrProducerClosed
	}
	n, err := p.partitions(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	waits := make([]*batch, 0, 1)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrProducerClosed
	}
	if len(p.ids) != n {
		p.ids = make([]int, n)
		for i := range p.ids {
			p.ids[i] = i
		}
	}
	for _, m := range msgs {
		m.Topic = ""
		if m.Time.IsZero() {
			m.Time = now
		}
		b := p.enqueue(p.balancer.Balance(m, p.ids...), m)
		if len(waits) == 0 || waits[len(waits)-1] != b {
			waits = append(waits, b)
		}
	}
	p.mu.Unlock()
	for _, b := range waits {
		select {
		case <-b.done:
			if b.err != nil {
				return b.err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// enqueue adds m to its partition's open batch (a new one when the last is
// full or being sent) and starts the lane's sender if it is idle. p.mu is
// held.
func (p *Producer) enqueue(part int, m kafka.Message) *batch {
	l := p.lanes[part]
	if l == nil {
		l = &lane{}
		p.lanes[part] = l
	}
	size := messageSize(m)
	var b *batch
	if k := len(l.queue); k > 0 {
		if last := l.queue[k-1]; len(last.msgs) < p.maxMsgs && last.bytes+size <= p.maxBytes {
			b = last
		}
	}
	if b == nil {
		b = &batch{done: make(chan struct{})}
		l.queue = append(l.queue, b)
	}
	b.msgs = append(b.msgs, m)
	b.bytes += size
	if !l.sending {
		l.sending = true
		p.wg.Add(1)
		go p.send(part, l)
	}
	return b
}

// send sends the lane's batches one at a time until its queue is empty.
func (p *Producer) send(part int, l *lane) {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		if len(l.queue) == 0 {
			l.sending = false
			p.mu.Unlock()
			return
		}
		b := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		p.mu.Unlock()
		if p.onBatch != nil {
			p.onBatch(len(b.msgs))
		}
		b.err = p.produce(part, b.msgs)
		if p.completion != nil {
			p.completion(b.msgs, b.err)
		}
		close(b.done)
	}
}

// produce writes msgs to partition part in one request, retrying temporary
// errors like kafka-go's Writer (MaxAttempts, 20 → 200 ms backoff). On
// success each message is given its partition and offset.
func (p *Producer) produce(part int, msgs []kafka.Message) error {
	records := make([]kafka.Record, len(msgs))
	var err error
	for attempt := 0; attempt < p.attempts; attempt++ {
		if attempt > 0 {
			time.Sleep(backoff(attempt, p.backoffMin, p.backoffMax))
		}
		for i, m := range msgs { // a record reader is consumed by each attempt
			records[i] = kafka.Record{Time: m.Time, Key: kafka.NewBytes(m.Key), Value: kafka.NewBytes(m.Value), Headers: m.Headers}
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		res, e := p.client.Produce(ctx, &kafka.ProduceRequest{Topic: p.topic, Partition: part,
			RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(records...)})
		cancel()
		if e == nil && res.Error != nil {
			e = res.Error
		}
		if e == nil {
			for i := range msgs {
				msgs[i].Topic, msgs[i].Partition, msgs[i].Offset = p.topic, part, res.BaseOffset+int64(i)
			}
			return nil
		}
		err = e
		if !retriable(err) {
			break
		}
	}
	return fmt.Errorf("producing %d messages to %s/%d: %w", len(msgs), p.topic, part, err)
}

// partitions is the topic's partition count, from the transport's cached
// metadata (refreshed every MetadataTTL), read as the Writer reads it:
// straight from the transport, without building a MetadataResponse.
func (p *Producer) partitions(ctx context.Context) (int, error) {
	r, err := p.client.Transport.RoundTrip(ctx, p.client.Addr, &metadataAPI.Request{TopicNames: []string{p.topic}})
	if err != nil {
		return 0, fmt.Errorf("metadata of %s: %w", p.topic, err)
	}
	for _, t := range r.(*metadataAPI.Response).Topics {
		if t.Name != p.topic {
			continue
		}
		if t.ErrorCode != 0 {
			return 0, fmt.Errorf("metadata of %s: %w", p.topic, kafka.Error(t.ErrorCode))
		}
		if len(t.Partitions) > 0 {
			return len(t.Partitions), nil
		}
	}
	return 0, fmt.Errorf("metadata of %s: %w", p.topic, kafka.UnknownTopicOrPartition)
}

// Close refuses new messages, waits for the requests in flight and queued,
// then closes the idle connections to the brokers.
func (p *Producer) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	if t, ok := p.client.Transport.(*kafka.Transport); ok {
		t.CloseIdleConnections()
	}
	return nil
}

// retriable is kafka-go's Writer's test: a temporary error (a Kafka error
// marked temporary, or a timeout: context.DeadlineExceeded is one) or a
// broken connection.
func retriable(err error) bool {
	var temp interface{ Temporary() bool }
	if errors.As(err, &temp) && temp.Temporary() {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// backoff is the wait before attempt (1, 2, ...): doubling from lo, capped
// at hi, with up to a quarter of jitter.
func backoff(attempt int, lo, hi time.Duration) time.Duration {
	d := min(lo<<(attempt-1), hi)
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// messageSize estimates a message's bytes in a record batch.
func messageSize(m kafka.Message) int {
	n := len(m.Key) + len(m.Value) + 24
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value) + 4
	}
	return n
}
