package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"
)

// InstrumentRedis adds client spans for Redis commands to rdb. A command
// gets a span only as the child of a span that records: the gateway's hot
// path pays nothing when sampled off, and background polling outside a
// traced pass makes no root spans. (redisotel builds the caller and the full
// command text, the event JSON included, before it knows whether the span
// records, and starts a root span for every parentless command.)
func InstrumentRedis(rdb redis.UniversalClient) {
	host := ""
	if c, ok := rdb.(*redis.Client); ok {
		host, _, _ = net.SplitHostPort(c.Options().Addr)
	}
	rdb.AddHook(redisHook{host: host})
}

type redisHook struct{ host string }

// StartRedisSpan starts the span the hook would give cmd, for a command sent
// in a pipeline shared with other requests (the hook sees only the
// pipeline, outside any request's trace).
func StartRedisSpan(ctx context.Context, rdb redis.UniversalClient, cmd redis.Cmder) (context.Context, trace.Span) {
	host := ""
	if c, ok := rdb.(*redis.Client); ok {
		host, _, _ = net.SplitHostPort(c.Options().Addr)
	}
	return redisHook{host: host}.start(ctx, cmd.FullName(), 1, statement(cmd))
}

func (redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !traced(ctx) {
			return next(ctx, cmd)
		}
		ctx, span := h.start(ctx, cmd.FullName(), 1, statement(cmd))
		defer span.End()
		err := next(ctx, cmd)
		if err != nil && err != redis.Nil {
			RecordError(span, err)
		}
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !traced(ctx) {
			return next(ctx, cmds)
		}
		names := make([]string, 0, len(cmds))
		for i, c := range cmds {
			if i == 8 {
				names = append(names, "…")
				break
			}
			names = append(names, c.FullName())
		}
		ctx, span := h.start(ctx, "pipeline", len(cmds), strings.Join(names, " "))
		defer span.End()
		err := next(ctx, cmds)
		if err != nil && err != redis.Nil {
			RecordError(span, err)
		}
		return err
	}
}

// inRedisSpan marks the context of a Redis span: the commands a new
// connection's handshake runs under it (HELLO, CLIENT SETINFO) get none.
type inRedisSpan struct{}

func traced(ctx context.Context) bool {
	return trace.SpanFromContext(ctx).IsRecording() && ctx.Value(inRedisSpan{}) == nil
}

func (h redisHook) start(ctx context.Context, name string, n int, stmt string) (context.Context, trace.Span) {
	ctx = context.WithValue(ctx, inRedisSpan{}, true)
	attrs := []attribute.KeyValue{semconv.DBSystemNameRedis, semconv.DBOperationName(name), semconv.DBQueryText(stmt),
		semconv.ServerAddress(h.host)}
	if n > 1 {
		attrs = append(attrs, semconv.DBOperationBatchSize(n))
	}
	return Tracer().Start(ctx, "redis "+name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// statement is the command with its key-like arguments and without values
// (a script's arguments include the whole event): at most the first 4
// arguments, each cut to 96 bytes.
func statement(cmd redis.Cmder) string {
	args := cmd.Args()
	var b strings.Builder
	b.WriteString(cmd.FullName())
	for i, a := range args {
		if i == 0 {
			continue
		}
		if i > 4 {
			b.WriteString(" …")
			break
		}
		s, ok := a.(string)
		if !ok {
			b.WriteString(" ?")
			continue
		}
		if len(s) > 96 {
			s = s[:96] + "…"
		}
		b.WriteByte(' ')
		b.WriteString(s)
	}
	return b.String()
}

// RedisLogsTo sends go-redis's own log lines (a pool that could not dial, a
// Sentinel's news) to log, as JSON records at info level like every other
// line of the process, instead of go-redis's plain-text default on stderr.
// They are at info: each component reports the failure that matters to it
// itself, at warn or error.
//
// At most redisLogsPerSecond lines a second (as many at once): a pool that
// cannot dial logs every attempt of every connection, nine lines a second
// while a process waits for Redis at start. The next line written says how
// many were left out before it.
func RedisLogsTo(log *slog.Logger) {
	redis.SetLogger(newRedisLog(log))
}

const redisLogsPerSecond = 1

type redisLog struct {
	log        *slog.Logger
	lines      *rate.Limiter
	suppressed atomic.Int64
}

func newRedisLog(log *slog.Logger) *redisLog {
	return &redisLog{log: log, lines: rate.NewLimiter(redisLogsPerSecond, redisLogsPerSecond)}
}

func (l *redisLog) Printf(ctx context.Context, format string, v ...any) {
	if !l.lines.Allow() {
		l.suppressed.Add(1)
		return
	}
	args := []any{"detail", strings.TrimSpace(fmt.Sprintf(format, v...))}
	if n := l.suppressed.Swap(0); n > 0 {
		args = append(args, "lines_left_out_before", n)
	}
	l.log.InfoContext(ctx, "redis client", args...)
}
