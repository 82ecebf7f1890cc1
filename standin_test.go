//go:build dev

package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/database"
	"orderpipe/pkg/standin"
)

// TestStandinsReplaceOnlyMissingServices: `orderpipe all` starts a stand-in
// only for a service whose variable is unset and whose default address is
// silent, and the stand-ins carry the pipeline's migration and Redis calls.
func TestStandinsReplaceOnlyMissingServices(t *testing.T) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	ctx := context.Background()

	t.Run("UnsetAndSilent", func(t *testing.T) {
		unsetenv(t, "REDIS_ADDR", "REDIS_ADDR_FILE", "DATABASE_URL", "DATABASE_URL_FILE")
		cfg := config{RedisAddr: freeAddr(t), DatabaseURL: "postgres://postgres@" + freeAddr(t) + "/orderpipe?sslmode=disable"}
		before := cfg
		stop, err := startStandins(ctx, log, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if cfg.RedisAddr == before.RedisAddr || cfg.DatabaseURL == before.DatabaseURL {
			t.Fatalf("stand-ins not used: %+v", cfg)
		}
		rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Errorf("redis stand-in: %v", err)
		}
		if err := migrate(ctx, log, cfg); err != nil {
			t.Fatalf("migrating the postgres stand-in: %v", err)
		}
		pool, err := database.Open(ctx, cfg.DatabaseURL, 2)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = pool.QueryRow(ctx, `SELECT count(*) FROM item_stock`).Scan(&n)
		pool.Close()
		if err != nil {
			t.Errorf("migrated tables: %v", err)
		}
		stop()
		addr, _ := standin.PostgresTarget(cfg.DatabaseURL)
		for _, a := range []string{cfg.RedisAddr, addr} {
			if standin.Reachable(ctx, a, 200*time.Millisecond) {
				t.Errorf("%s still answers after stop", a)
			}
		}
	})

	t.Run("UnsetButAnswering", func(t *testing.T) {
		unsetenv(t, "REDIS_ADDR", "REDIS_ADDR_FILE", "DATABASE_URL", "DATABASE_URL_FILE")
		srv, err := standin.StartRedis("127.0.0.1:0") // any server on the default address
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		// Postgres: the address answers, so it is used as is.
		cfg := config{RedisAddr: srv.Addr, DatabaseURL: "postgres://postgres@" + srv.Addr + "/orderpipe"}
		before := cfg
		stop, err := startStandins(ctx, log, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if cfg.RedisAddr != before.RedisAddr || cfg.DatabaseURL != before.DatabaseURL {
			t.Errorf("a stand-in replaced an answering server: %+v, was %+v", cfg, before)
		}
	})

	t.Run("SetButSilent", func(t *testing.T) {
		cfg := config{RedisAddr: freeAddr(t), DatabaseURL: "postgres://postgres@" + freeAddr(t) + "/orderpipe"}
		t.Setenv("REDIS_ADDR", cfg.RedisAddr)
		t.Setenv("DATABASE_URL", cfg.DatabaseURL)
		before := cfg
		stop, err := startStandins(ctx, log, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if cfg.RedisAddr != before.RedisAddr || cfg.DatabaseURL != before.DatabaseURL {
			t.Errorf("a stand-in replaced a configured server: %+v, was %+v", cfg, before)
		}
	})
}
