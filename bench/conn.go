package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// sender sends order requests for one client goroutine over one keep-alive
// HTTP/1.1 connection: the request is written in one system call from
// prebuilt bytes and the answer parsed by net/http's own reader. net/http's
// Client costs several times more CPU per request (a reader and a writer
// goroutine per connection, channel hand-offs, a context per request), and on
// a machine whose cores the load tool shares with the pipeline that CPU is
// taken from the system being measured. https URLs go through http.Client.
type sender struct {
	client  *http.Client // https, or nil
	url     string       // the order endpoint, for client
	addr    string       // host:port, for raw connections
	head    []byte       // request line and headers up to Content-Length's value
	timeout time.Duration

	conn net.Conn
	br   *bufio.Reader
	buf  []byte
}

func newSender(client *http.Client, base string, timeout time.Duration) (*sender, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("bad --url: %w", err)
	}
	s := &sender{url: base + "/v1/orders", timeout: timeout}
	if u.Scheme != "http" {
		s.client = client
		return s, nil
	}
	s.addr = u.Host
	if u.Port() == "" {
		s.addr = net.JoinHostPort(u.Hostname(), "80")
	}
	s.head = fmt.Appendf(nil, "POST %s/v1/orders HTTP/1.1\r\nHost: %s\r\nUser-Agent: orderpipe-bench\r\n"+
		"Content-Type: application/json\r\nContent-Length: ", u.EscapedPath(), u.Host)
	return s, nil
}

// send posts body and returns the status and the answer's body; status 0
// means no answer (the connection failed or timed out; it is redialled for
// the next request).
func (s *sender) send(ctx context.Context, body []byte) (int, []byte) {
	if s.client != nil {
		return sendClient(ctx, s.client, s.url, body)
	}
	if s.conn == nil {
		c, err := (&net.Dialer{Timeout: s.timeout}).DialContext(ctx, "tcp", s.addr)
		if err != nil {
			return 0, nil
		}
		s.conn, s.br = c, bufio.NewReaderSize(c, 4096)
	}
	s.buf = append(s.buf[:0], s.head...)
	s.buf = strconv.AppendInt(s.buf, int64(len(body)), 10)
	s.buf = append(s.buf, "\r\n\r\n"...)
	s.buf = append(s.buf, body...)
	_ = s.conn.SetDeadline(time.Now().Add(s.timeout))
	if _, err := s.conn.Write(s.buf); err != nil {
		s.close()
		return 0, nil
	}
	res, err := http.ReadResponse(s.br, nil)
	if err != nil {
		s.close()
		return 0, nil
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		s.close()
		return 0, nil
	}
	if res.Close {
		s.close()
	}
	return res.StatusCode, raw
}

func (s *sender) close() {
	if s.conn != nil {
		s.conn.Close()
		s.conn, s.br = nil, nil
	}
}
