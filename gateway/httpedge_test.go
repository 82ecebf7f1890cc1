package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"orderpipe/gateway/client"
	"orderpipe/pkg/telemetry"
)

// TestBearerSchemeAnyCase: the Bearer scheme's name is matched in any case
// and may be followed by several spaces (RFC 9110 §11.1, RFC 6750), on the
// admin API and on the order API's service tokens; a refusal is 401 with a
// WWW-Authenticate challenge (RFC 9110 §15.5.2). Two Authorization headers
// are refused whatever their order.
func TestBearerSchemeAnyCase(t *testing.T) {
	t.Parallel()
	s := New(Config{AdminToken: "adm", APITokens: []string{"tok1", "tok2"}},
		Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	ask := func(method, path string, auth ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		for _, a := range auth {
			req.Header.Add("Authorization", a)
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w
	}
	// An admin read of an unknown activity id form passes the token check
	// and is refused by the handler (400), with no store needed.
	const adminPath, orderPath = "/admin/v1/activities/abc", "/v1/orders"
	for _, auth := range []string{"Bearer adm", "bearer adm", "BEARER adm", "Bearer   adm", "bEaReR adm"} {
		if w := ask(http.MethodGet, adminPath, auth); w.Code != http.StatusBadRequest {
			t.Errorf("admin with %q: %d %s, want the token accepted (400 for the id)", auth, w.Code, w.Body)
		}
	}
	for _, auth := range []string{"bearer tok1", "Bearer  tok2"} {
		// The order body {} is refused after the token check: 400.
		if w := ask(http.MethodPost, orderPath, auth); w.Code != http.StatusBadRequest {
			t.Errorf("order API with %q: %d %s, want the token accepted (400 for the body)", auth, w.Code, w.Body)
		}
	}
	refused := []struct {
		path string
		auth []string
	}{
		{adminPath, nil}, {adminPath, []string{"Bearer"}}, {adminPath, []string{"Bearer "}}, {adminPath, []string{"Basic adm"}},
		{adminPath, []string{"Bearer adm "}}, {adminPath, []string{"Bearer tok1"}}, {adminPath, []string{"Bearer wrong", "Bearer adm"}},
		{adminPath, []string{"Bearer adm", "Bearer wrong"}}, {adminPath, []string{"Beareradm"}},
		{orderPath, nil}, {orderPath, []string{"Bearer adm"}}, {orderPath, []string{"Bearer tok1", "Bearer tok1"}},
	}
	for _, c := range refused {
		w := ask(http.MethodGet, c.path, c.auth...)
		if c.path == orderPath {
			w = ask(http.MethodPost, c.path, c.auth...)
		}
		if w.Code != http.StatusUnauthorized || errorCode(w.Body.String()) != "UNAUTHORIZED" || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s with %q: %d %s (WWW-Authenticate %q), want 401 UNAUTHORIZED with a Bearer challenge",
				c.path, c.auth, w.Code, w.Body, w.Header().Get("WWW-Authenticate"))
		}
	}
}

// TestDeclaredTooLargeIsRefusedAtOnce: a body whose Content-Length is over
// the limit is 413 PAYLOAD_TOO_LARGE before any of it is read — the client
// that sends two bytes of a declared 99999 is not left waiting for the
// server's read deadline, and one waiting on "Expect: 100-continue" gets
// the refusal instead of a go-ahead — on every endpoint that takes a body.
// A body cut short of its Content-Length is 400 naming the body, without
// the socket's addresses.
func TestDeclaredTooLargeIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	s := New(Config{AdminToken: "adm"}, Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(s.Handler()) // no read deadline: a read of the missing bytes would hang
	t.Cleanup(srv.Close)
	raw := func(t *testing.T, head string, body string) (int, string, string) {
		t.Helper()
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Not a timing assertion: a bound on a wait that must not happen.
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, head+"\r\n"+body); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return res.StatusCode, errorCode(string(b)), string(b)
	}
	for _, c := range []struct {
		method, path string
		limit        int
	}{
		{"POST", "/v1/orders", MaxBodyBytes},
		{"POST", "/v1/orders/1-2-x/cancel", MaxBodyBytes},
		{"PUT", "/admin/v1/activities/1", maxAdminBody},
	} {
		for _, expect := range []string{"", "Expect: 100-continue\r\n"} {
			head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer adm\r\n%sContent-Length: %d\r\n",
				c.method, c.path, expect, c.limit+1)
			body := "{}"
			if expect != "" {
				body = "" // a client waiting for 100 Continue sends nothing yet
			}
			if status, code, b := raw(t, head, body); status != http.StatusRequestEntityTooLarge || code != "PAYLOAD_TOO_LARGE" {
				t.Errorf("%s %s declaring %d bytes (%q): %d %s, want 413 PAYLOAD_TOO_LARGE", c.method, c.path, c.limit+1, expect, status, b)
			}
		}
	}
	// Cut short: the client closes its side after two of ten bytes.
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	_, _ = io.WriteString(c, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{}")
	_ = c.(*net.TCPConn).CloseWrite()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a body cut short: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	var e client.ErrorBody
	_ = json.Unmarshal(b, &e)
	if res.StatusCode != http.StatusBadRequest || e.Error.Code != "INVALID_REQUEST" || !strings.Contains(e.Error.Message, "body") ||
		strings.Contains(e.Error.Message, "127.0.0.1") {
		t.Errorf("a body cut short: %d %s, want 400 INVALID_REQUEST naming the body, no addresses", res.StatusCode, b)
	}
}

// TestUnmatchedRequestsAreCounted: 404 NOT_FOUND and 405
// METHOD_NOT_ALLOWED answers count in orderpipe_http_requests_total, under
// the one route label "unmatched" whatever the path.
func TestUnmatchedRequestsAreCounted(t *testing.T) {
	t.Parallel()
	m := telemetry.NewMetrics()
	s := New(Config{}, Deps{Metrics: m, Log: slog.New(slog.DiscardHandler)})
	for _, r := range []struct{ method, path string }{
		{"GET", "/nothing"}, {"GET", "/v1/nothing/else"}, {"GET", "//v1/orders"}, {"DELETE", "/v1/orders"}, {"PUT", "/healthz"}, {"GET", "/admin/v1/activities"},
	} {
		s.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(r.method, r.path, nil))
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(unmatchedRoute, "NOT_FOUND")); got != 4 {
		t.Errorf("NOT_FOUND counted %v times, want 4", got)
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(unmatchedRoute, "METHOD_NOT_ALLOWED")); got != 2 {
		t.Errorf("METHOD_NOT_ALLOWED counted %v times, want 2", got)
	}
}
