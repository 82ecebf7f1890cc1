package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
)

// contractReport is the context key of WithContractReport.
type contractReport struct{}

// WithContractReport returns ctx carrying report, which Transport calls with
// each exchange under ctx that breaks the contract (a test's tb.Errorf).
func WithContractReport(ctx context.Context, report func(error)) context.Context {
	return context.WithValue(ctx, contractReport{}, report)
}

// Transport is an http.RoundTripper (for gateway/client's HTTPClient) that
// sends through base and checks every exchange against c: what breaks the
// contract goes to the report the request's context carries
// (WithContractReport), and the answer is still returned, as it came, so
// the test sees it too. Without a report in the context a broken exchange
// is the round trip's error: nothing goes unchecked.
func (c *APIContract) Transport(base http.RoundTripper) http.RoundTripper {
	return contractTransport{c: c, base: base}
}

type contractTransport struct {
	c    *APIContract
	base http.RoundTripper
}

func (t contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	out := req
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		reqBody, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		out = req.Clone(req.Context())
		out.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	res, err := t.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(raw))
	if problem := t.c.Check(out, reqBody, res, raw); problem != nil {
		report, _ := req.Context().Value(contractReport{}).(func(error))
		if report == nil {
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, problem)
		}
		report(problem)
	}
	return res, nil
}
