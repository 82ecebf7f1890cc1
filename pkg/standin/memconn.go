package standin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// The embedded broker's clients in its own process (`orderpipe all`'s
// gateway, worker, relay and redrive) reach it through memory rather than
// loopback TCP: a produce, a fetch and their answers are a copy and a
// goroutine's wake-up instead of four system calls and the netpoller's
// wake-ups on each side. Other processes still connect over TCP to the same
// listener.

// pipeMax is what one direction of an in-memory connection holds unread
// before a write waits for its reader, as a socket's buffers do.
const pipeMax = 4 << 20

// pipeKeep is the most buffer a drained pipe keeps for the next write: a
// fetch answer of megabytes is let go once read, so an idle connection holds
// no more than this (a socket's would be the kernel's, not the heap's).
const pipeKeep = 64 << 10

// pipe is one direction of an in-memory connection.
type pipe struct {
	mu       sync.Mutex
	buf      []byte
	off      int           // buf[off:] is unread
	eof      bool          // the writing end closed: reads drain, then io.EOF
	gone     bool          // the reading end closed: writes fail
	readable chan struct{} // 1-buffered: bytes, or eof, arrived
	writable chan struct{} // 1-buffered: room was freed, or gone
}

func newPipe() *pipe {
	return &pipe{readable: make(chan struct{}, 1), writable: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// deadline is a connection's read or write deadline: a channel closed when
// it passes (the shape of net.Pipe's).
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	passed chan struct{}
}

func newDeadline() *deadline { return &deadline{passed: make(chan struct{})} }

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.passed // its timer fired: wait until it has closed the channel
	}
	d.timer = nil
	passed := isClosed(d.passed)
	if t.IsZero() {
		if passed {
			d.passed = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if passed {
			d.passed = make(chan struct{})
		}
		c := d.passed
		d.timer = time.AfterFunc(dur, func() { close(c) })
		return
	}
	if !passed {
		close(d.passed)
	}
}

func (d *deadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.passed
}

// memConn is one end of an in-memory, buffered, full-duplex connection; it
// behaves as a TCP connection does towards its peer: writes return once
// buffered, a close lets the peer read what was written and then io.EOF,
// and the peer's later writes fail.
type memConn struct {
	in, out       *pipe
	rd, wd        *deadline
	local, remote net.Addr
	closeOnce     sync.Once
	closed        chan struct{}
}

// memPair returns the two ends of a new in-memory connection; a is the
// dialer's (local la, remote ra), b the listener's.
func memPair(la, ra net.Addr) (a, b *memConn) {
	ab, ba := newPipe(), newPipe()
	a = &memConn{in: ba, out: ab, rd: newDeadline(), wd: newDeadline(), local: la, remote: ra, closed: make(chan struct{})}
	b = &memConn{in: ab, out: ba, rd: newDeadline(), wd: newDeadline(), local: ra, remote: la, closed: make(chan struct{})}
	return a, b
}

func (c *memConn) Read(p []byte) (int, error) {
	for {
		if isClosed(c.closed) {
			return 0, net.ErrClosed
		}
		rd := c.rd.wait()
		if isClosed(rd) {
			return 0, os.ErrDeadlineExceeded
		}
		if len(p) == 0 {
			return 0, nil
		}
		in := c.in
		in.mu.Lock()
		if len(in.buf) > in.off {
			n := copy(p, in.buf[in.off:])
			in.off += n
			more := len(in.buf) > in.off
			if !more {
				if cap(in.buf) > pipeKeep {
					in.buf = nil // let a large answer's buffer go
				} else {
					in.buf = in.buf[:0]
				}
				in.off = 0
			}
			in.mu.Unlock()
			signal(in.writable)
			if more {
				signal(in.readable)
			}
			return n, nil
		}
		if in.eof {
			in.mu.Unlock()
			signal(in.readable)
			return 0, io.EOF
		}
		in.mu.Unlock()
		select {
		case <-in.readable:
		case <-rd:
		case <-c.closed:
		}
	}
}

func (c *memConn) Write(p []byte) (int, error) {
	for {
		if isClosed(c.closed) {
			return 0, net.ErrClosed
		}
		wd := c.wd.wait()
		if isClosed(wd) {
			return 0, os.ErrDeadlineExceeded
		}
		out := c.out
		out.mu.Lock()
		if out.gone {
			out.mu.Unlock()
			return 0, io.ErrClosedPipe
		}
		if len(out.buf)-out.off < pipeMax {
			if out.off > 0 && out.off >= len(out.buf)/2 {
				out.buf = out.buf[:copy(out.buf, out.buf[out.off:])]
				out.off = 0
			}
			out.buf = append(out.buf, p...)
			out.mu.Unlock()
			signal(out.readable)
			return len(p), nil
		}
		out.mu.Unlock()
		select {
		case <-out.writable:
		case <-wd:
		case <-c.closed:
		}
	}
}

func (c *memConn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		err = nil
		close(c.closed)
		c.out.mu.Lock()
		c.out.eof = true
		c.out.mu.Unlock()
		signal(c.out.readable)
		c.in.mu.Lock()
		c.in.gone, c.in.buf, c.in.off = true, nil, 0
		c.in.mu.Unlock()
		signal(c.in.writable)
	})
	return err
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

func (c *memConn) SetDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return net.ErrClosed
	}
	c.rd.set(t)
	c.wd.set(t)
	return nil
}

func (c *memConn) SetReadDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return net.ErrClosed
	}
	c.rd.set(t)
	return nil
}

func (c *memConn) SetWriteDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return net.ErrClosed
	}
	c.wd.set(t)
	return nil
}

// memListener is a TCP listener that also accepts in-memory connections
// from its own process (Dial).
type memListener struct {
	net.Listener
	mem       chan net.Conn
	tcp       chan accepted
	done      chan struct{}
	closeOnce sync.Once
}

type accepted struct {
	conn net.Conn
	err  error
}

func newMemListener(ln net.Listener) *memListener {
	l := &memListener{Listener: ln, mem: make(chan net.Conn), tcp: make(chan accepted), done: make(chan struct{})}
	go l.acceptTCP()
	return l
}

func (l *memListener) acceptTCP() {
	for {
		conn, err := l.Listener.Accept()
		select {
		case l.tcp <- accepted{conn, err}:
		case <-l.done:
			if conn != nil {
				conn.Close()
			}
			return
		}
		if err != nil {
			return
		}
	}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case a := <-l.tcp:
		return a.conn, a.err
	case c := <-l.mem:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	err := net.ErrClosed
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.Listener.Close()
	})
	return err
}

// errBrokerClosed answers a dial of the embedded broker once it has stopped.
var errBrokerClosed = errors.New("connection refused: the embedded broker has stopped")

// dial connects to the listener through memory.
func (l *memListener) dial(ctx context.Context) (net.Conn, error) {
	ra := l.Listener.Addr()
	la := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	client, server := memPair(la, ra)
	select {
	case l.mem <- server:
		return client, nil
	case <-l.done:
		return nil, fmt.Errorf("dial %s: %w", ra, errBrokerClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
