package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"orderpipe/gateway/client"
)

// The client against the real gateway is exercised by every end-to-end
// test of the root package (their harness speaks through it). These tests
// cover what the gateway cannot be made to answer on cue: a lost answer
// followed by a replay, a body that is not the API's.

func TestCodesAreTheContracts(t *testing.T) {
	raw, err := os.ReadFile("../openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas struct {
				ErrorCode struct {
					Enum []client.Code `json:"enum"`
				} `json:"ErrorCode"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if want := doc.Components.Schemas.ErrorCode.Enum; len(want) == 0 || !slices.Equal(client.Codes, want) {
		t.Errorf("client.Codes = %v\nopenapi.json ErrorCode = %v", client.Codes, want)
	}
}

// script is a gateway stand-in answering POST /v1/orders with one scripted
// answer per attempt; "drop" closes the connection without an answer.
type script struct {
	mu       sync.Mutex
	answers  []string // "drop", or "<status> <Retry-After> <body>"
	bodies   [][]byte
	attempts int
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	i := min(s.attempts, len(s.answers)-1)
	s.attempts++
	var b [256]byte
	n, _ := r.Body.Read(b[:])
	s.bodies = append(s.bodies, append([]byte(nil), b[:n]...))
	a := s.answers[i]
	s.mu.Unlock()
	if a == "drop" {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
		return
	}
	var status int
	var retry, body string
	if err := json.Unmarshal([]byte(a), &[]any{&status, &retry, &body}); err != nil {
		panic(err)
	}
	if retry != "" {
		w.Header().Set("Retry-After", retry)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write([]byte(body)) //nolint:errcheck
}

const (
	accepted = `[202, "", "{\"requestId\":\"r-1\",\"orderNo\":\"1-10-abc\",\"status\":\"PENDING\",\"remaining\":4}"]`
	replayed = `[200, "", "{\"requestId\":\"r-1\",\"orderNo\":\"1-10-abc\",\"status\":\"PENDING\",\"remaining\":4,\"replayed\":true}"]`
	busy     = `[503, "", "{\"error\":{\"code\":\"UNAVAILABLE\",\"message\":\"redis unavailable\"}}"]`
	soldOut  = `[409, "", "{\"error\":{\"code\":\"SOLD_OUT\",\"message\":\"sold out\"}}"]`
	limited  = `[429, "7", "{\"error\":{\"code\":\"RATE_LIMITED\",\"message\":\"slow down\"}}"]`
	proxy    = `[502, "", "<html>bad gateway</html>"]`
)

func TestPlaceOrderRetrying(t *testing.T) {
	req := client.OrderRequest{RequestID: "r-1", UserID: 42, ActivityID: 1, ItemID: 10, Quantity: 1}
	fast := client.Retry{Budget: 2 * time.Second, Backoff: time.Millisecond}
	tests := []struct {
		name     string
		answers  []string
		retry    client.Retry
		attempts int
		status   int           // of the Placed, 0: an error
		err      *client.Error // errors.Is target
	}{
		{"AcceptedAtOnce", []string{accepted}, fast, 1, 202, nil},
		{"LostAnswerThenReplay", []string{"drop", busy, replayed}, fast, 3, 200, nil},
		{"ProxyPageIsRetried", []string{proxy, accepted}, fast, 2, 202, nil},
		{"RefusalIsFinal", []string{soldOut, accepted}, fast, 1, 0, client.ErrSoldOut},
		{"BudgetSpent", []string{busy}, client.Retry{Budget: 50 * time.Millisecond, Backoff: 20 * time.Millisecond}, 2, 0, client.ErrUnavailable},
		// A Retry-After longer than what is left of the budget is not waited.
		{"RetryAfterPastBudget", []string{limited, accepted}, fast, 1, 0, client.ErrRateLimited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{answers: tt.answers}
			srv := httptest.NewServer(s)
			defer srv.Close()
			c := client.New(srv.URL + "/")
			var seen []int
			tt.retry.OnAttemptFunc = func(n int, _ client.Placed, _ error) { seen = append(seen, n) }
			p, err := c.PlaceOrderRetrying(context.Background(), req, tt.retry)
			switch {
			case tt.err == nil && err != nil:
				t.Fatalf("err = %v", err)
			case tt.err != nil && !errors.Is(err, tt.err):
				t.Fatalf("err = %v, want %v", err, tt.err)
			case tt.err == nil && (p.HTTPStatus != tt.status || p.OrderNo != "1-10-abc" || p.Replayed != (tt.status == 200)):
				t.Errorf("placed = %+v, want status %d", p, tt.status)
			}
			if s.attempts != tt.attempts || len(seen) != tt.attempts {
				t.Errorf("%d attempts (%v seen), want %d", s.attempts, seen, tt.attempts)
			}
			for i, b := range s.bodies {
				var got client.OrderRequest
				if err := json.Unmarshal(b, &got); err != nil || got != req {
					t.Errorf("attempt %d sent %s, want the same request each time", i+1, b)
				}
			}
		})
	}
}

func TestErrorAnswers(t *testing.T) {
	s := &script{answers: []string{limited}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	_, err := client.New(srv.URL).PlaceOrder(context.Background(), client.OrderRequest{RequestID: "r"})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 429 || e.Code != client.CodeRateLimited || e.Message != "slow down" || e.RetryAfter != 7*time.Second {
		t.Fatalf("err = %#v", err)
	}
	if !errors.Is(err, client.ErrRateLimited) || errors.Is(err, client.ErrUnavailable) || client.CodeOf(err) != client.CodeRateLimited || !client.IsRetriable(err) {
		t.Errorf("%v: Is/CodeOf/IsRetriable disagree", err)
	}
	if errors.Is(err, &client.Error{Code: client.CodeRateLimited, Status: 503}) {
		t.Error("a target with another status matched")
	}
	s.answers = []string{proxy}
	_, err = client.New(srv.URL).GetOrder(context.Background(), "1-10-abc")
	if client.CodeOf(err) != client.CodeUndecodable || !client.IsRetriable(err) {
		t.Errorf("a proxy's page: %v", err)
	}
	srv.Close()
	_, err = client.New(srv.URL).Pay(context.Background(), "1-10-abc")
	if err == nil || client.CodeOf(err) != "" || !client.IsRetriable(err) {
		t.Errorf("no server: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := client.New(srv.URL).Pay(ctx, "x"); client.IsRetriable(err) {
		t.Errorf("a cancelled call is retriable: %v", err)
	}
}

// TestRetryIdempotent: an idempotent admin call answered 503 is sent again
// until it succeeds; one answered 400 is not.
func TestRetryIdempotent(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/admin/v1/activities/2/preheat":
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":{"code":"INVALID_REQUEST","message":"no"}}`))
		case n < 3:
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"code":"UNAVAILABLE","message":"order store unavailable"}}`))
		default:
			w.Write([]byte(`{"activityId":1,"name":"s","startsAt":"2026-01-01T00:00:00Z","endsAt":"2026-01-02T00:00:00Z","perUserLimit":1,"items":[]}`))
		}
	}))
	defer srv.Close()
	c := &client.Client{BaseURL: srv.URL, AdminToken: "t"}
	ctx := context.Background()
	if err := client.RetryIdempotent(ctx, func() error { _, err := c.Preheat(ctx, 1); return err }); err != nil || calls != 3 {
		t.Fatalf("after two 503s: err %v after %d calls, want success on the third", err, calls)
	}
	calls = 10
	if err := client.RetryIdempotent(ctx, func() error { _, err := c.Preheat(ctx, 2); return err }); err == nil || calls != 11 {
		t.Fatalf("a 400: err %v after %d calls, want the error after one", err, calls-10)
	}
}
