//go:build dev

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"orderpipe/pkg/database"
	"orderpipe/pkg/order"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/standin"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/target"
)

// withServers is a configuration naming these Redis and Postgres servers.
func withServers(redisAddr, databaseURL string) config {
	return config{Shared: target.Shared{Redis: redisconn.Config{Addr: redisAddr}, Database: database.Config{URL: databaseURL}}}
}

// TestStandinsReplaceOnlyMissingServices: `orderpipe all` starts a stand-in
// only for a service whose variable is unset and whose default address is
// silent, and the stand-ins carry the pipeline's migration and Redis calls.
func TestStandinsReplaceOnlyMissingServices(t *testing.T) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	ctx := context.Background()

	t.Run("UnsetAndSilent", func(t *testing.T) {
		unsetenv(t, "REDIS_ADDR", "REDIS_ADDR_FILE", "DATABASE_URL", "DATABASE_URL_FILE")
		cfg := withServers(freeAddr(t), "postgres://postgres@"+freeAddr(t)+"/orderpipe?sslmode=disable")
		before := cfg
		stop, err := startStandins(ctx, log, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if cfg.Redis.Addr == before.Redis.Addr || cfg.Database.URL == before.Database.URL {
			t.Fatalf("stand-ins not used: %+v", cfg)
		}
		rdb, err := cfg.Redis.New(redisconn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		if err := stock.New(rdb, "").Ping(ctx); err != nil {
			t.Errorf("redis stand-in: %v", err)
		}
		if err := database.Prepare(ctx, log, cfg.Database.URL); err != nil {
			t.Fatalf("migrating the postgres stand-in: %v", err)
		}
		pool, err := database.Open(ctx, cfg.Database.URL, 2)
		if err != nil {
			t.Fatal(err)
		}
		// The stock table, read by the store that will use it: empty, not missing.
		_, err = order.NewStore(pool).ItemStockOf(ctx, 1, 1)
		pool.Close()
		if !errors.Is(err, order.ErrNotFound) {
			t.Errorf("migrated tables: %v", err)
		}
		stop()
		addr, _ := standin.PostgresTarget(cfg.Database.URL)
		for _, a := range []string{cfg.Redis.Addr, addr} {
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
		cfg := withServers(srv.Addr, "postgres://postgres@"+srv.Addr+"/orderpipe")
		before := cfg
		stop, err := startStandins(ctx, log, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if cfg.Redis.Addr != before.Redis.Addr || cfg.Database.URL != before.Database.URL {
			t.Errorf("a stand-in replaced an answering server: %+v, was %+v", cfg, before)
		}
	})

	t.Run("SetButSilent", func(t *testing.T) {
		cfg := withServers(freeAddr(t), "postgres://postgres@"+freeAddr(t)+"/orderpipe")
		t.Setenv("REDIS_ADDR", cfg.Redis.Addr)
		t.Setenv("DATABASE_URL", cfg.Database.URL)
		before := cfg
		stop, err := startStandins(ctx, log, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if cfg.Redis.Addr != before.Redis.Addr || cfg.Database.URL != before.Database.URL {
			t.Errorf("a stand-in replaced a configured server: %+v, was %+v", cfg, before)
		}
	})
}
