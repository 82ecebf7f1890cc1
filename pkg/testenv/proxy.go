package testenv

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Proxy is a TCP proxy a test can cut and restore, to take a dependency
// "down" without touching the shared server.
type Proxy struct {
	Addr   string
	target string // under mu
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	hung   atomic.Bool
	dials  atomic.Int64
}

// Dials is how many connections the proxy has accepted: what a client's
// new connections cost the server behind it.
func (p *Proxy) Dials() int64 { return p.dials.Load() }

// MustProxy starts a proxy to target on a free local port, closed at
// cleanup. The port is below the kernel's ephemeral range (FreeAddr): Up
// listens on it again after Down.
func MustProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", FreeAddr(tb))
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	tb.Cleanup(p.Down)
	return p
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.dials.Add(1)
			go p.pipe(c)
		}
	}()
}

func (p *Proxy) pipe(c net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut while dialing
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() { p.copy(up, c); up.Close() }()
	p.copy(c, up)
	c.Close()
}

// copy forwards src to dst, dropping what arrives while the proxy hangs.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.hung.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Hang turns the proxy into a black hole: connections stay open and are
// accepted, but nothing is forwarded either way, like a server that stopped
// answering without closing anything.
func (p *Proxy) Hang() { p.hung.Store(true) }

// Unhang forwards again what arrives from now on (what was dropped stays
// lost, as on a network that came back).
func (p *Proxy) Unhang() { p.hung.Store(false) }

// Down refuses new connections and resets open ones.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// Retarget sends new connections to target and resets open ones, as a
// failover moves a service address to the promoted replica.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// Up listens again on the same address.
func (p *Proxy) Up(tb testing.TB) {
	tb.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger briefly after Down
		if ln, err = net.Listen("tcp", p.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("restoring proxy on %s: %v", p.Addr, err)
	}
	p.serve(ln)
}

// RedisServer is a redis-server process a test owns (to stop and restart it).
type RedisServer struct {
	Addr  string
	dir   string
	port  int
	extra []string // more redis-server arguments (--replicaof)
	cmd   *exec.Cmd
}

// MustRedisServer starts a private redis-server with an append-only file,
// so a restart keeps its data, on a port below the kernel's ephemeral range
// (a restart listens on it again); stopped at cleanup. Skips if
// redis-server is not installed.
func MustRedisServer(tb testing.TB, extra ...string) *RedisServer {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server not installed")
	}
	port := mustFreePort(tb, 0)
	s := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: tb.TempDir(), port: port, extra: extra}
	s.Start(tb)
	tb.Cleanup(s.Stop)
	return s
}

// Start runs the server and waits until it accepts connections.
func (s *RedisServer) Start(tb testing.TB) {
	tb.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", filepath.Join(s.dir, "redis.log")}, s.extra...)
	s.cmd = exec.Command("redis-server", args...)
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	if err := s.cmd.Start(); err != nil {
		tb.Fatalf("starting redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", s.Addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redis-server on %s did not start", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// MustLoadingRedis is a private redis-server restarted on an append-only
// file it takes about 2 s to load (20 000 keys at a key-load-delay of 100
// µs, events served every KiB read), checked to answer LOADING: a Redis
// still replaying its file after a restart.
func MustLoadingRedis(tb testing.TB) *RedisServer {
	tb.Helper()
	s := MustRedisServer(tb, "--key-load-delay", "100", "--loading-process-events-interval-bytes", "1024")
	ctx := context.Background()
	pipe := s.Client(tb).Pipeline()
	for i := range 20_000 {
		pipe.Set(ctx, "filler:"+strconv.Itoa(i), "x", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatal(err)
	}
	s.Stop()
	s.Start(tb)
	if err := s.Client(tb).Ping(ctx).Err(); !redis.IsLoadingError(err) {
		tb.Fatalf("the restarted Redis answered PING with %v, want LOADING", err)
	}
	return s
}

// MustCutReplica is a private redis-server that is the replica of a
// primary it cannot reach, with replica-serve-stale-data off, checked to
// answer MASTERDOWN: the address a failover is under way behind, until
// Promote.
func MustCutReplica(tb testing.TB) *RedisServer {
	tb.Helper()
	s := MustRedisServer(tb, "--replicaof", "127.0.0.1", strconv.Itoa(mustFreePort(tb, 0)), "--replica-serve-stale-data", "no")
	if err := s.Client(tb).Ping(context.Background()).Err(); !redis.IsMasterDownError(err) {
		tb.Fatalf("the cut replica answered PING with %v, want MASTERDOWN", err)
	}
	return s
}

// RedisPair is a primary and its replica, two redis-server processes.
type RedisPair struct {
	Primary, Replica *RedisServer
}

// MustRedisPair starts a primary and a replica of it, and waits until the
// replica is in sync; both stopped at cleanup. Skips if redis-server is
// not installed.
func MustRedisPair(tb testing.TB) RedisPair {
	tb.Helper()
	primary := MustRedisServer(tb)
	return RedisPair{Primary: primary, Replica: MustReplicaOf(tb, primary)}
}

// MustReplicaOf starts a replica of primary (a promoted replica's new one,
// as an operator or Sentinel would attach) and waits until it is in sync.
func MustReplicaOf(tb testing.TB, primary *RedisServer) *RedisServer {
	tb.Helper()
	host, port, _ := net.SplitHostPort(primary.Addr)
	replica := MustRedisServer(tb, "--replicaof", host, port)
	WaitFor(tb, 15*time.Second, "the replica to sync with its primary", func() bool {
		info, err := RedisInfo(context.Background(), replica.Addr, "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	return replica
}

// Client is a client of the server (no retries), closed at cleanup.
func (s *RedisServer) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Pause stops the server's process (SIGSTOP): connections stay open and
// nothing is answered, as a replica stuck in a long fork or a VM pause.
func (s *RedisServer) Pause(tb testing.TB) {
	tb.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("pausing redis-server: %v", err)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *RedisServer) Resume(tb testing.TB) {
	tb.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		tb.Fatalf("resuming redis-server: %v", err)
	}
}

// Stop kills the server (its append-only file keeps every write).
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill() //nolint:errcheck
	s.cmd.Wait()         //nolint:errcheck
	s.cmd = nil
}
