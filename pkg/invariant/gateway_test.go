package invariant

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"orderpipe/gateway/client"
)

// The typed client is a Gateway: the checker's tests, bench audit and chaos
// suite hand it theirs.
var _ Gateway = (*client.Client)(nil)

// TestRetriableIsTheClients: the checker asks again exactly when
// gateway/client's IsRetriable would, without importing the client.
func TestRetriableIsTheClients(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		nil,
		context.Canceled,
		fmt.Errorf("GET: %w", context.Canceled),
		errors.New("connection refused"),
		context.DeadlineExceeded,
		&client.Error{Status: http.StatusServiceUnavailable, Code: client.CodeUnavailable},
		&client.Error{Status: http.StatusTooManyRequests, Code: client.CodeRateLimited},
		&client.Error{Status: http.StatusConflict, Code: client.CodeOrderPending},
		&client.Error{Status: http.StatusNotFound, Code: client.CodeOrderNotFound},
		fmt.Errorf("wrapped: %w", &client.Error{Status: http.StatusBadGateway, Code: client.CodeUndecodable}),
	} {
		if got, want := retriable(err), client.IsRetriable(err); got != want {
			t.Errorf("retriable(%v) = %v, client.IsRetriable says %v", err, got, want)
		}
	}
}

// TestAskOrderAsksAgainOnlyWhenWorthIt: a 503 is asked again (up to three
// times in all), a 404 is the answer.
func TestAskOrderAsksAgainOnlyWhenWorthIt(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/orders/gone":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"code":"ORDER_NOT_FOUND","message":"no such order"}}`)
		case n == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"UNAVAILABLE","message":"breaker open"}}`)
		default:
			fmt.Fprint(w, `{"orderNo":"o-1","requestId":"r-1","status":"PAID"}`)
		}
	}))
	defer srv.Close()
	gw := client.New(srv.URL)

	rid, status, err := askOrder(context.Background(), gw, "o-1")
	if err != nil || rid != "r-1" || status != "PAID" || calls.Load() != 2 {
		t.Errorf("after a 503: %q %q %v in %d calls, want r-1 PAID in 2", rid, status, err, calls.Load())
	}
	calls.Store(10)
	if _, _, err := askOrder(context.Background(), gw, "gone"); !errors.Is(err, client.ErrOrderNotFound) || calls.Load() != 11 {
		t.Errorf("a 404: %v in %d calls, want ORDER_NOT_FOUND in 1", err, calls.Load()-10)
	}
}
