package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"orderpipe/gateway/client"
)

// sender sends order requests for one client goroutine over one keep-alive
// HTTP/1.1 connection: the request is written in one system call from
// prebuilt bytes and the answer read by a minimal HTTP/1.1 parser. net/http's
// Client costs several times more CPU per request (a reader and a writer
// goroutine per connection, channel hand-offs, a context per request), and on
// a machine whose cores the load tool shares with the pipeline that CPU is
// taken from the system being measured. So on http URLs the wire is this
// file's, and only the answer's reading is the gateway client's
// (client.ReadPlaced, in answerOf); https URLs go through the client itself.
type sender struct {
	api     *client.Client // https, or nil
	addr    string         // host:port, for raw connections
	head    []byte         // request line and headers up to Content-Length's value
	timeout time.Duration

	conn net.Conn
	br   *bufio.Reader
	buf  []byte
	// unwatch stops the watch that breaks off the connection's I/O when
	// the run's context ends (Ctrl-C), instead of waiting out the timeout.
	unwatch func() bool
}

func newSender(hc *http.Client, base string, timeout time.Duration) (*sender, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("bad --url: %w", err)
	}
	s := &sender{timeout: timeout}
	if u.Scheme != "http" {
		s.api = newAPI(hc, base, "")
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
	if s.api != nil {
		res, err := s.api.Do(ctx, http.MethodPost, "/v1/orders", "application/json", body, nil)
		if err != nil {
			return 0, nil
		}
		return res.Status, res.Body
	}
	if s.dial(ctx) != nil {
		return 0, nil
	}
	s.buf = append(s.buf[:0], s.head...)
	s.buf = strconv.AppendInt(s.buf, int64(len(body)), 10)
	s.buf = append(s.buf, "\r\n\r\n"...)
	s.buf = append(s.buf, body...)
	_ = s.conn.SetDeadline(time.Now().Add(s.timeout))
	if ctx.Err() != nil { // ended before the deadline above could be broken off
		s.close()
		return 0, nil
	}
	if _, err := s.conn.Write(s.buf); err != nil {
		s.close()
		return 0, nil
	}
	status, body, keep, err := readResponse(s.br)
	if err != nil {
		s.close()
		return 0, nil
	}
	if !keep {
		s.close()
	}
	return status, body
}

// dial opens the sender's connection unless it is open (or the URL is
// https, whose connections http.Client keeps).
func (s *sender) dial(ctx context.Context) error {
	if s.api != nil || s.conn != nil {
		return nil
	}
	c, err := (&net.Dialer{Timeout: s.timeout}).DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return err
	}
	s.conn, s.br = c, bufio.NewReaderSize(c, 4096)
	s.unwatch = context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	return nil
}

// readResponse reads one HTTP/1.1 response: the status line, the headers
// (only Content-Length, Transfer-Encoding and Connection matter) and the
// body. keep is false when the connection cannot carry another request.
// It allocates only the body, where http.ReadResponse builds a header map
// per answer.
func readResponse(br *bufio.Reader) (status int, body []byte, keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, nil, false, err
	}
	// "HTTP/1.1 202 Accepted\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, nil, false, fmt.Errorf("bad status line %q", line)
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, nil, false, fmt.Errorf("bad status line %q", line)
	}
	keep = line[7] == '1'
	length, chunked := -1, false
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, nil, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, false, fmt.Errorf("bad header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, nil, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			}
		}
	}
	switch {
	case chunked:
		if body, err = io.ReadAll(httputil.NewChunkedReader(br)); err == nil {
			err = skipTrailer(br)
		}
	case length >= 0:
		body = make([]byte, length)
		_, err = io.ReadFull(br, body)
	default: // the body runs to the end of the connection
		body, err = io.ReadAll(br)
		keep = false
	}
	if err != nil {
		return 0, nil, false, err
	}
	return status, body, keep, nil
}

// skipTrailer reads the trailer section after a chunked body, up to and
// including its empty line.
func skipTrailer(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}

func (s *sender) close() {
	if s.conn != nil {
		s.unwatch()
		s.conn.Close()
		s.conn, s.br, s.unwatch = nil, nil, nil
	}
}
