package testenv

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy a test can cut and restore, to take a dependency
// "down" without touching the shared server.
type Proxy struct {
	Addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	hung   atomic.Bool
	dials  atomic.Int64
}

// Dials is how many connections the proxy has accepted: what a client's
// new connections cost the server behind it.
func (p *Proxy) Dials() int64 { return p.dials.Load() }

// MustProxy starts a proxy to target on a free local port, closed at cleanup.
func MustProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
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
	Addr string
	dir  string
	port int
	cmd  *exec.Cmd
}

// MustRedisServer starts a private redis-server with an append-only file,
// so a restart keeps its data; stopped at cleanup. Skips if redis-server is
// not installed.
func MustRedisServer(tb testing.TB) *RedisServer {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: tb.TempDir(), port: port}
	s.Start(tb)
	tb.Cleanup(s.Stop)
	return s
}

// Start runs the server and waits until it accepts connections.
func (s *RedisServer) Start(tb testing.TB) {
	tb.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", filepath.Join(s.dir, "redis.log"))
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

// Stop kills the server (its append-only file keeps every write).
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill() //nolint:errcheck
	s.cmd.Wait()         //nolint:errcheck
	s.cmd = nil
}
