package testenv

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Administration of the Redis and Postgres servers a test tool runs itself
// (the chaos suite's primary and replica, its PostgreSQL): no key, no table,
// only the servers. They return errors, as the suite is not a test.

// RedisInfo is INFO section of the Redis at addr, asked once (no retry)
// within a second: a readiness poll's question.
func RedisInfo(ctx context.Context, addr, section string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	return c.Info(ctx, section).Result()
}

// RedisKeyCount is how many keys the Redis at addr holds (DBSIZE).
func RedisKeyCount(ctx context.Context, addr string) (int64, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	return c.DBSize(ctx).Result()
}

// PromoteRedis makes the replica at addr a primary (REPLICAOF NO ONE), as
// a failover does.
func PromoteRedis(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	return c.SlaveOf(ctx, "NO", "ONE").Err()
}

// PingPostgres connects to the Postgres URL and pings it.
func PingPostgres(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// DropDatabase drops the database name on the server of serverURL, closing
// its connections (WITH (FORCE)); a missing one is no error.
func DropDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}
