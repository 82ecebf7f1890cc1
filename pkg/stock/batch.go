package stock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

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

// batcher coalesces concurrent calls of one script into pipelines: one write
// and one read system call for many scripts instead of one each, for the
// gateway and for Redis. Each script still runs atomically on its own; a
// pipeline is not a transaction. Nothing waits for companions: a call is
// sent at once while fewer than maxPipelines are in flight, otherwise it
// joins the next batch, which the first pipeline to finish sends. The
// goroutines that send exist only while calls are queued.
type batcher struct {
	rdb    redis.UniversalClient
	script *redis.Script
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
	keys  []string
	args  []any
	state atomic.Int32 // queued → sent, or queued → abandoned
	done  chan struct{}
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
	if ctx.Err() != nil {
		return notSent(ctx), 0
	}
	c := &call{keys: keys, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.running < maxPipelines {
		b.running++
		go b.send()
	}
	b.mu.Unlock()

	var span trace.Span
	if trace.SpanFromContext(ctx).IsRecording() {
		// What the span shows; the pipeline builds its own command.
		shown := redis.NewCmd(ctx, append([]any{"evalsha", b.script.Hash(), len(keys)}, append(toAny(keys), args...)...)...)
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
	err := b.pipeline(ctx, batch, b.script.EvalSha)
	if err != nil {
		var again []*call
		for _, c := range batch {
			if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
				again = append(again, c)
			}
		}
		if len(again) > 0 {
			_ = b.pipeline(ctx, again, b.script.Eval)
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
	send func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) error {
	var wait *redis.Cmd
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			c.cmd = send(ctx, p, c.keys, c.args...)
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
