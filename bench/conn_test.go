package bench

import (
	"bufio"
	"context"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/testenv"
)

func TestReadResponse(t *testing.T) {
	t.Parallel()
	stream := "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\ncontent-length: 14\r\n\r\n{\"orderNo\":1}\n" +
		"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n3\r\n12}\r\n0\r\nX-Trailer: t\r\n\r\n" +
		"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}" +
		"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n" +
		"HTTP/1.1 200 OK\r\n\r\nto the end"
	br := bufio.NewReader(strings.NewReader(stream))
	for _, want := range []struct {
		status int
		body   string
		keep   bool
	}{
		{202, "{\"orderNo\":1}\n", true},
		{409, `{"a":12}`, true},
		{503, "{}", false},
		{200, "", false},
		{200, "to the end", false},
	} {
		status, body, keep, err := readResponse(br)
		if err != nil || status != want.status || string(body) != want.body || keep != want.keep {
			t.Fatalf("got %d %q keep=%v err=%v, want %d %q keep=%v", status, body, keep, err, want.status, want.body, want.keep)
		}
	}
	for _, bad := range []string{"", "HTTP/1.1 2x2 OK\r\n\r\n", "SMTP ready\r\n", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"} {
		if status, _, _, err := readResponse(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("%q: status %d, want an error", bad, status)
		}
	}
}

// TestSenderStopsWhenTheRunIsCancelled: a request in flight to a gateway
// that never answers is broken off when the run's context ends (Ctrl-C),
// not after the per-request timeout.
func TestSenderStopsWhenTheRunIsCancelled(t *testing.T) {
	t.Parallel()
	s, err := newSender(nil, "http://"+testenv.SilentServer(t), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		status, _ := s.send(ctx, []byte(`{}`))
		done <- status
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case status := <-done:
		if status != 0 {
			t.Fatalf("status %d from a server that never answered", status)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("send still waiting 30 s after its context ended (timeout is an hour)")
	}
	if status, _ := s.send(ctx, []byte(`{}`)); status != 0 {
		t.Fatalf("send with an ended context: status %d", status)
	}
}
