//go:build dev

package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
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
		unsetenv(t, "REDIS_ADDR", "REDIS_ADDR_FILE", "REDIS_URL", "REDIS_URL_FILE", "DATABASE_URL", "DATABASE_URL_FILE")
		// Where the stand-ins' addresses are recorded, and the Postgres
		// stand-in's data: open to the postgres user it runs as under root.
		tmp, err := os.MkdirTemp("", "standins")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(tmp) })
		if err := os.Chmod(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("TMPDIR", tmp)
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
		// A command run beside it (locate, events, dlq) dials the stand-ins.
		var note bytes.Buffer
		env := standinEnv(func(name string) string { return "default of " + name }, &note)
		if got := env("REDIS_ADDR"); got != cfg.Redis.Addr {
			t.Errorf("REDIS_ADDR beside the stand-ins = %q, want %q", got, cfg.Redis.Addr)
		}
		if got := env("DATABASE_URL"); got != cfg.Database.URL {
			t.Errorf("DATABASE_URL beside the stand-ins = %q, want %q", got, cfg.Database.URL)
		}
		if got := env("KAFKA_BROKERS"); got != "default of KAFKA_BROKERS" {
			t.Errorf("KAFKA_BROKERS = %q: only the stand-ins' variables change", got)
		}
		if !strings.Contains(note.String(), "stand-ins of the running orderpipe all") {
			t.Errorf("no note on stderr: %q", note.String())
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
		if _, err := standin.ReadAddrs(); !errors.Is(err, standin.ErrNoStandins) {
			t.Errorf("stand-ins' addresses after stop: %v, want ErrNoStandins", err)
		}
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
		mustKeepServers(t, log, withServers(srv.Addr, "postgres://postgres@"+srv.Addr+"/orderpipe"), "an answering")
	})

	t.Run("SetButSilent", func(t *testing.T) {
		cfg := withServers(freeAddr(t), "postgres://postgres@"+freeAddr(t)+"/orderpipe")
		t.Setenv("REDIS_ADDR", cfg.Redis.Addr)
		t.Setenv("DATABASE_URL", cfg.Database.URL)
		mustKeepServers(t, log, cfg, "a configured")
	})
}

// mustKeepServers starts the stand-ins for cfg and fails the test if one
// replaced either of its servers (what names which kind they are).
func mustKeepServers(t *testing.T, log *slog.Logger, cfg config, what string) {
	t.Helper()
	before := cfg
	stop, err := startStandins(context.Background(), log, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if cfg.Redis.Addr != before.Redis.Addr || cfg.Database.URL != before.Database.URL {
		t.Errorf("a stand-in replaced %s server: %+v, was %+v", what, cfg, before)
	}
}

// TestStandinEnv: a command run beside `make run` reads the stand-ins'
// addresses only from a live `orderpipe all`, and never over a variable the
// user set.
func TestStandinEnv(t *testing.T) {
	unsetenv(t, "REDIS_ADDR", "REDIS_ADDR_FILE", "REDIS_URL", "REDIS_URL_FILE", "DATABASE_URL", "DATABASE_URL_FILE")
	t.Setenv("TMPDIR", t.TempDir())
	base := func(name string) string { return "default of " + name }
	rec := standin.Addrs{PID: os.Getpid(), RedisAddr: "127.0.0.1:1111", DatabaseURL: "postgres://postgres@127.0.0.1:2222/orderpipe"}

	t.Run("NoneRecorded", func(t *testing.T) {
		var note bytes.Buffer
		if got := standinEnv(base, &note)("REDIS_ADDR"); got != "default of REDIS_ADDR" || note.Len() != 0 {
			t.Errorf("REDIS_ADDR = %q, note %q", got, note.String())
		}
	})
	t.Run("ProcessEnded", func(t *testing.T) {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Skip("no true(1):", err)
		}
		dead := rec
		dead.PID = cmd.Process.Pid // reaped: no such process now
		remove, err := standin.WriteAddrs(dead)
		if err != nil {
			t.Fatal(err)
		}
		defer remove()
		if got := standinEnv(base, io.Discard)("DATABASE_URL"); got != "default of DATABASE_URL" {
			t.Errorf("a dead process's record was used: DATABASE_URL = %q", got)
		}
	})
	t.Run("UserSetWins", func(t *testing.T) {
		remove, err := standin.WriteAddrs(rec)
		if err != nil {
			t.Fatal(err)
		}
		defer remove()
		t.Setenv("REDIS_ADDR", "10.0.0.1:6379")
		env := standinEnv(func(name string) string { return os.Getenv(name) }, io.Discard)
		if got := env("REDIS_ADDR"); got != "10.0.0.1:6379" {
			t.Errorf("REDIS_ADDR = %q, want the one set", got)
		}
		if got := env("DATABASE_URL"); got != rec.DatabaseURL {
			t.Errorf("DATABASE_URL = %q, want the stand-in's", got)
		}
	})
}
