package testenv_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"orderpipe/pkg/testenv"
)

// TestContractTransport: an exchange that breaks the contract reaches the
// report its context carries, and the answer still reaches the caller;
// without a report it is the round trip's error. One that keeps the
// contract reports nothing.
func TestContractTransport(t *testing.T) {
	spec, err := os.ReadFile("../../gateway/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	contract, err := testenv.NewAPIContract(spec)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Has("teapot") {
			w.WriteHeader(http.StatusTeapot) // no status /healthz documents
		}
		io.WriteString(w, `{"status":"ok"}`) //nolint:errcheck
	}))
	defer srv.Close()
	hc := &http.Client{Transport: contract.Transport(http.DefaultTransport)}
	get := func(ctx context.Context, query string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/healthz"+query, nil)
		return hc.Do(req)
	}

	var reported []error
	ctx := testenv.WithContractReport(context.Background(), func(err error) { reported = append(reported, err) })
	res, err := get(ctx, "")
	if err != nil || res.StatusCode != http.StatusOK || len(reported) != 0 {
		t.Fatalf("a documented answer: %v %v, reported %v", res, err, reported)
	}
	res, err = get(ctx, "?teapot")
	if err != nil || res.StatusCode != http.StatusTeapot || len(reported) != 1 {
		t.Fatalf("an undocumented answer with a report: %v %v, reported %v", res, err, reported)
	}
	body, _ := io.ReadAll(res.Body)
	if string(body) != `{"status":"ok"}` {
		t.Errorf("the answer's body after the check: %q", body)
	}
	if _, err := get(context.Background(), "?teapot"); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("an undocumented answer without a report: err %v, want the contract's", err)
	}
}
