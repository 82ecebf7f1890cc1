package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WaitSynced waits until the server, a replica, is in sync with its primary.
func (s *RedisServer) WaitSynced(tb testing.TB) {
	tb.Helper()
	WaitFor(tb, 15*time.Second, "the replica to sync with its primary", func() bool {
		info, err := RedisInfo(context.Background(), s.Addr, "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
}

// Promote makes the server, a replica, a primary (REPLICAOF NO ONE) with the data it had, as a failover does.
func (s *RedisServer) Promote(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := PromoteRedis(ctx, s.Addr); err != nil {
		tb.Fatalf("promoting the replica %s: %v", s.Addr, err)
	}
}

// TerminateBackend ends a connection's server process (pg_terminate_backend), as that backend's crash would.
func TerminateBackend(tb testing.TB, pool *pgxpool.Pool, pid int32) {
	tb.Helper()
	if _, err := pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		tb.Fatalf("terminating backend %d: %v", pid, err)
	}
}
