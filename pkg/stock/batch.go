package stock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/telemetry"
)

// ErrNotSent is returned by Reserve (and MarkPublished) when its context ended while the call
// was still queued: the script was never sent, so nothing was reserved.
var ErrNotSent = errors.New("script not sent")

const (
	// maxPipelines is how many pipelines of reserve calls may be in flight
	// at once. Redis runs scripts one at a time, so a few keep it busy while
	// the gateway writes the next batch; more only shrink the batches.
	// Measured in docs/benchmarks.md.
	maxPipelines = 4
	// maxBatch bounds one pipeline (about 1 KiB per reserve call).
	maxBatch = 256
)

// batcher coalesces concurrent script calls into pipelines: one write and
// one read system call for many scripts instead of one each, for the
// gateway and for Redis. Each script still runs atomically on its own; a
// pipeline is not a transaction. A call waits for no companion: it is sent
// at once while fewer than maxPipelines are in flight, otherwise it joins
// the next batch, which the first pipeline to finish sends. Only a lazy
// call (runLazy: a call nobody is waiting on to answer a client) waits, up
// to its linger, to ride in the pipeline of the next call. The goroutines
// that send exist only while calls are queued.
type batcher struct {
	rdb    redis.UniversalClient
	script *redis.Script // what run and runAcked call
	// wait, when Replicas > 0, ends each pipeline with WAIT: on the same
	// connection, so it covers every script of the pipeline (and anything
	// this connection wrote before), one round trip to the replicas per
	// batch rather than per call.
	wait ReplicaWait

	mu      sync.Mutex
	queue   []*call
	running int // sending goroutines
}

// call is one queued script call.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	state  atomic.Int32 // queued → sent, or queued → abandoned
	done   chan struct{}
	// Set before done is closed.
	cmd   *redis.Cmd
	batch int
	// acked is how many replicas acknowledged the pipeline's writes (WAIT's
	// reply; 0 when WAIT failed), with batcher.wait on.
	acked int64
}

const (
	queued int32 = iota
	sent
	abandoned
)

// run runs the script through a shared pipeline and returns its reply. A
// call whose context ends before it is sent is never sent and fails with
// ErrNotSent. Once sent it waits for the reply as long as the client's read
// timeout lets the pipeline take, so its outcome is known whenever Redis
// answered; a sent call is not cancelled by its context.
func (b *batcher) run(ctx context.Context, keys []string, args ...any) *redis.Cmd {
	cmd, _ := b.runAcked(ctx, keys, args...)
	return cmd
}

// runAcked is run that also says how many replicas acknowledged the call's
// writes (0 unless batcher.wait is on).
func (b *batcher) runAcked(ctx context.Context, keys []string, args ...any) (*redis.Cmd, int64) {
	return b.call(ctx, b.script, 0, keys, args)
}

// runLazy is run of script for a call whose reply no client is waiting
// for: when no pipeline is in flight it waits up to linger for another call
// to share one with (at a few hundred calls a second and more, the next
// reserve), instead of a round trip of its own.
func (b *batcher) runLazy(ctx context.Context, script *redis.Script, linger time.Duration, keys []string, args ...any) *redis.Cmd {
	cmd, _ := b.call(ctx, script, linger, keys, args)
	return cmd
}

func (b *batcher) call(ctx context.Context, script *redis.Script, linger time.Duration, keys []string, args []any) (*redis.Cmd, int64) {
	if ctx.Err() != nil {
		return notSent(ctx), 0
	}
	c := &call{script: script, keys: keys, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	switch {
	case b.running > 0 && (linger > 0 || b.running >= maxPipelines):
		// A sender is running: it takes this call when its pipeline is back.
	case linger == 0:
		b.running++
		go b.send()
	default:
		time.AfterFunc(linger, b.flushLazy)
	}
	b.mu.Unlock()

	var span trace.Span
	if trace.SpanFromContext(ctx).IsRecording() {
		// What the span shows; the pipeline builds its own command.
		shown := redis.NewCmd(ctx, append([]any{"evalsha", script.Hash(), len(keys)}, append(toAny(keys), args...)...)...)
		_, span = telemetry.StartRedisSpan(ctx, b.rdb, shown)
		defer span.End()
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(queued, abandoned) {
			return notSent(ctx), 0
		}
		<-c.done
	}
	if span != nil {
		span.SetAttributes(semconv.DBOperationBatchSize(c.batch))
		if err := c.cmd.Err(); err != nil && err != redis.Nil {
			telemetry.RecordError(span, err)
		}
	}
	return c.cmd, c.acked
}

// flushLazy sends the lazy calls no other call took along within their
// linger.
func (b *batcher) flushLazy() {
	b.mu.Lock()
	if len(b.queue) > 0 && b.running == 0 {
		b.running++
		go b.send()
	}
	b.mu.Unlock()
}

func notSent(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(fmt.Errorf("%w: %w", ErrNotSent, context.Cause(ctx)))
	return cmd
}

// send runs pipelines while calls are queued, then exits.
func (b *batcher) send() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxBatch)
		if n == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		batch := make([]*call, 0, n)
		for _, c := range b.queue[:n] {
			if c.state.CompareAndSwap(queued, sent) {
				batch = append(batch, c)
			}
		}
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		if len(batch) > 0 {
			b.exec(batch)
		}
	}
}

// exec sends one batch with EVALSHA. The pipeline is bounded by the
// client's read and write timeouts (REDIS_TIMEOUT), not by any caller's
// context: a script that was sent must get its reply read. Calls refused
// with NOSCRIPT (the script cache was flushed) did not run and are sent
// again with EVAL.
func (b *batcher) exec(batch []*call) {
	ctx := context.Background()
	err := b.pipeline(ctx, batch, (*redis.Script).EvalSha)
	if err != nil {
		var again []*call
		for _, c := range batch {
			if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
				again = append(again, c)
			}
		}
		if len(again) > 0 {
			_ = b.pipeline(ctx, again, (*redis.Script).Eval)
		}
	}
	for _, c := range batch {
		c.batch = len(batch)
		close(c.done)
	}
}

// pipeline sends the calls with send (EVALSHA or EVAL) in one pipeline,
// followed by WAIT when the batcher waits for replicas. A pipeline on one
// node runs on one connection, which is what WAIT's count is about.
func (b *batcher) pipeline(ctx context.Context, calls []*call,
	send func(*redis.Script, context.Context, redis.Scripter, []string, ...any) *redis.Cmd) error {
	var wait *redis.Cmd
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			c.cmd = send(c.script, ctx, p, c.keys, c.args...)
		}
		if b.wait.Replicas > 0 {
			// Pipeliner has no Wait; the pipeline's read is bounded by
			// REDIS_TIMEOUT, which the configuration keeps above Timeout.
			wait = p.Do(ctx, "wait", b.wait.Replicas, b.wait.Timeout.Milliseconds())
		}
		return nil
	})
	if wait != nil {
		acked, _ := wait.Int64() // 0 when WAIT failed: not known to be replicated
		for _, c := range calls {
			c.acked = acked
		}
	}
	return err
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
