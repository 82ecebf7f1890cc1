// Package testenv gives tests real dependencies: an empty, migrated Postgres
// database of their own from a pool (pool.go), a Redis client with a unique
// key prefix, and a Kafka-protocol broker (an in-process kfake cluster
// unless TEST_KAFKA_BROKERS is set). What a test takes is removed or given
// back when it ends, so tests can run in parallel. Only tests import it, and
// the chaos suite (bench/chaos, which only its test runs) for the
// administration of its own servers (servers.go).
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"orderpipe/pkg/rediskeys"
)

// DatabaseURL is the server tests create their databases on.
func DatabaseURL() string {
	if v := os.Getenv("TEST_DATABASE_URL"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// RedisAddr is the Redis tests use.
func RedisAddr() string {
	if v := os.Getenv("TEST_REDIS_ADDR"); v != "" {
		return v
	}
	return "127.0.0.1:6379"
}

// UniqueName returns a short random lowercase name with the given prefix.
func UniqueName(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// Database is a migrated database of the test's own (see MustDatabase).
type Database struct {
	Pool *pgxpool.Pool
	URL  string
}

// Redis is a client plus the key prefix the test owns.
type Redis struct {
	Client *redis.Client
	Prefix string
}

// MustRedis connects to the test Redis and deletes every key under the
// returned prefix at cleanup.
func MustRedis(tb testing.TB) Redis {
	tb.Helper()
	client := redis.NewClient(&redis.Options{Addr: RedisAddr(), PoolSize: 64})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		tb.Fatalf("connecting to test redis %s: %v", RedisAddr(), err)
	}
	prefix := UniqueName("t") + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		DeleteKeys(ctx, client, prefix)
		client.Close()
	})
	return Redis{Client: client, Prefix: prefix}
}

// DeleteKeys removes every key starting with prefix, a thousand per UNLINK,
// so a benchmark's hundreds of thousands of keys go within the cleanup's time.
func DeleteKeys(ctx context.Context, client *redis.Client, prefix string) {
	rediskeys.Delete(ctx, client, prefix+"*") //nolint:errcheck // best effort at cleanup
}

// Keys lists the keys under prefix (sorted by the caller if needed).
func Keys(tb testing.TB, client *redis.Client, prefix string) []string {
	tb.Helper()
	var keys []string
	iter := client.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		tb.Fatalf("scanning redis keys: %v", err)
	}
	return keys
}

// Kafka is a Kafka-protocol endpoint for one test.
type Kafka struct {
	Brokers []string
	// Cluster is the in-process broker, nil when TEST_KAFKA_BROKERS is set.
	Cluster *kfake.Cluster
}

// MustKafka returns TEST_KAFKA_BROKERS if set, otherwise an in-process kfake
// cluster closed at cleanup. Tests use unique topic names either way.
func MustKafka(tb testing.TB) Kafka {
	tb.Helper()
	if v := os.Getenv("TEST_KAFKA_BROKERS"); v != "" {
		return Kafka{Brokers: strings.Split(v, ",")}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		tb.Fatalf("starting kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return Kafka{Brokers: c.ListenAddrs(), Cluster: c}
}

// WaitFor polls cond until it holds, failing the test after within.
func WaitFor(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// MustConfigError fails tb unless err is what a configuration's check (what)
// should answer: nil when want is "", else an error that says want; and
// never one that shows secret, since such errors reach logs.
func MustConfigError(tb testing.TB, what string, err error, want, secret string) {
	tb.Helper()
	switch {
	case want == "" && err != nil:
		tb.Fatalf("%s: %v", what, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		tb.Fatalf("%s: %v, want an error with %q", what, err, want)
	case err != nil && strings.Contains(err.Error(), secret):
		tb.Errorf("the error shows the password: %v", err)
	}
}

// SilentServer is the address of a TCP server that accepts connections,
// reads what is sent and never answers (a peer that hangs); closed at
// cleanup.
func SilentServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }() // until the client hangs up
		}
	}()
	return ln.Addr().String()
}
