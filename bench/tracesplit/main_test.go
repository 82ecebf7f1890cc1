package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

const slowFor = 20 * time.Millisecond

// slowStep is what the slow requests block in; the test names it with -wait.
//
//go:noinline
func slowStep() { time.Sleep(slowFor) }

// TestSplitFindsWhatTheSlowRequestsWaitedIn traces a real HTTP server on a
// port while one keep-alive client sends 50 requests, every tenth of which
// sleeps in slowStep: the split must see every request and charge those
// five, and only those, with their time in slowStep.
func TestSplitFindsWhatTheSlowRequestsWaitedIn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") == "1" {
			slowStep()
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	client := srv.Client()
	for i := range 50 {
		res, err := client.Get(srv.URL + fmt.Sprintf("/?slow=%d", map[bool]int{true: 1}[i%10 == 9]))
		if err != nil {
			trace.Stop()
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body) //nolint:errcheck
		res.Body.Close()
	}
	time.Sleep(50 * time.Millisecond) // the last request's goroutine goes back to reading
	trace.Stop()

	reqs, err := split(bytes.NewReader(buf.Bytes()), []waitClass{{"slow", "tracesplit.slowStep"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) < 48 || len(reqs) > 50 {
		t.Fatalf("split saw %d requests, want 48-50 of the 50 sent (the first may start before any wait)", len(reqs))
	}
	var out strings.Builder
	if err := report(&out, reqs); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	slow := 0
	for i, r := range reqs {
		switch got := time.Duration(r.blocked["slow"]); {
		case got >= slowFor:
			slow++
			if r.total < r.running+r.runnable+r.blocked["slow"] {
				t.Errorf("request %d: its parts add up to more than its total: %+v", i, r)
			}
		case got != 0:
			t.Errorf("request %d: %v charged to slowStep, which sleeps %v or is not called", i, got, slowFor)
		}
	}
	if slow != 5 {
		t.Errorf("%d requests blocked in slowStep for %v, want the 5 that called it", slow, slowFor)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("%d requests on the server", len(reqs))) || !strings.Contains(out.String(), "slowest 5% (2)") {
		t.Errorf("report does not show the slowest requests blocked in slow:\n%s", out.String())
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.trace")
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	trace.Stop()
	if err := os.WriteFile(empty, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"-wait", "noequals", empty}, "want NAME=PATTERN"},
		{[]string{filepath.Join(t.TempDir(), "missing.trace")}, "no such file"},
		{[]string{empty}, "no complete HTTP/1 request"},
		{[]string{"main_test.go"}, "reading trace"},
	} {
		err := run(tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
