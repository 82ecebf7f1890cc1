package testenv

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// RedisClient is a client of the Redis at addr, closed at cleanup: a second
// replica's own connections, or a client of a proxy or of a dead address.
// With timeout > 0 it fails fast (no retries, timeout to dial and to read),
// else it has go-redis's defaults.
func RedisClient(tb testing.TB, addr string, timeout time.Duration) *redis.Client {
	tb.Helper()
	opts := &redis.Options{Addr: addr}
	if timeout > 0 {
		opts.MaxRetries, opts.DialTimeout, opts.ReadTimeout = -1, timeout, timeout
	}
	c := redis.NewClient(opts)
	tb.Cleanup(func() { c.Close() })
	return c
}

// CommandCounts counts the commands a client sends, pipelined ones too, by
// lowercase name.
type CommandCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// CountCommands counts from now on the commands c sends.
func CountCommands(c *redis.Client) *CommandCounts {
	cc := &CommandCounts{n: map[string]int{}}
	c.AddHook(cc)
	return cc
}

// Counts is a copy of the counts so far.
func (c *CommandCounts) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (c *CommandCounts) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		c.n[strings.ToLower(cmd.Name())]++
	}
}

// DialHook, ProcessHook and ProcessPipelineHook make it a redis.Hook.
func (c *CommandCounts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *CommandCounts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.add(cmd); return next(ctx, cmd) }
}

func (c *CommandCounts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.add(cmds...); return next(ctx, cmds) }
}

// CommandCalls is how many times the server has run cmd (INFO
// commandstats), read on a connection of its own.
func (s *RedisServer) CommandCalls(tb testing.TB, cmd string) int64 {
	tb.Helper()
	info, err := RedisInfo(context.Background(), s.Addr, "commandstats")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			tb.Fatalf("commandstats line %q: %v", line, err)
		}
		return n
	}
	return 0
}

// QueryCounter counts the queries a pool sends to Postgres.
type QueryCounter struct{ atomic.Int64 }

// TraceQueryStart and TraceQueryEnd make it a pgx.QueryTracer.
func (q *QueryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.Add(1)
	return ctx
}

func (q *QueryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// MustCountedPool is a pool of at most maxConns connections to the database
// at url whose every query is counted, closed at cleanup.
func MustCountedPool(tb testing.TB, url string, maxConns int32) (*pgxpool.Pool, *QueryCounter) {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	q := &QueryCounter{}
	cfg.ConnConfig.Tracer = q
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool, q
}
