package standin

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"orderpipe/pkg/database"
	"orderpipe/pkg/setting"
)

// probeTimeout bounds the check whether a default address answers.
const probeTimeout = 500 * time.Millisecond

// ForMissing lets `orderpipe all` run on a machine that has only Go (in a
// build with -tags dev: make run; the production build has no stand-ins): for
// Redis and for Postgres, when its variable (REDIS_ADDR or REDIS_URL,
// DATABASE_URL, or the _FILE form) is unset and nothing answers on the default
// address, it starts a throwaway stand-in and points *redisAddr or
// *databaseURL at it. A real server is always preferred. stop ends the
// stand-ins; their data is gone.
func ForMissing(ctx context.Context, log *slog.Logger, redisAddr, databaseURL *string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if !setting.Set("REDIS_ADDR") && !setting.Set("REDIS_URL") && !Reachable(ctx, *redisAddr, probeTimeout) {
		r, err := StartRedis("127.0.0.1:0")
		if err != nil {
			return func() {}, err
		}
		stops = append(stops, r.Close)
		log.Warn("no Redis answers at "+*redisAddr+" and REDIS_ADDR and REDIS_URL are unset: using an in-memory miniredis stand-in; "+
			"its data is lost on exit (set REDIS_ADDR or start redis-server for a real one)", "redis", r.Addr)
		*redisAddr = r.Addr
	}
	if pgAddr, db := PostgresTarget(*databaseURL); !setting.Set("DATABASE_URL") && !Reachable(ctx, pgAddr, probeTimeout) {
		p, err := StartPostgres(ctx, db)
		if err != nil {
			stop()
			return func() {}, fmt.Errorf("no Postgres answers at %s and DATABASE_URL is unset, and no stand-in could start: %w", pgAddr, err)
		}
		stops = append(stops, func() {
			if err := p.Close(); err != nil {
				log.Warn("stopping the postgres stand-in", "err", err)
			}
		})
		log.Warn("no Postgres answers at "+pgAddr+" and DATABASE_URL is unset: using a throwaway PostgreSQL stand-in "+
			"in a temporary directory; its data is lost on exit (set DATABASE_URL or start PostgreSQL for a real one)",
			"postgres", database.Redact(p.URL), "via", p.Via)
		*databaseURL = p.URL
	}
	return stop, nil
}

// PostgresTarget is the host:port and database name of a Postgres URL.
func PostgresTarget(dsn string) (addr, db string) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", ""
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	return net.JoinHostPort(u.Hostname(), port), strings.TrimPrefix(u.Path, "/")
}
