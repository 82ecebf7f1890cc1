// Package client is the Go client of the gateway's HTTP API
// (gateway/openapi.json): every route, every error code as a typed error,
// and the retry a storefront needs around POST /v1/orders. It is what the
// end-to-end tests, the load tool (orderpipe bench) and the chaos suite's
// storefront speak through, and it is meant for storefront integrators: it
// imports only the standard library, never the server. The gateway encodes
// its answers with this package's types, so a shape is written once and
// the client decodes what the server wrote.
//
// A storefront places an order with a requestId it chose once and keeps for
// every retry of that purchase:
//
//	c := client.New("https://orders.example.com")
//	c.Token = os.Getenv("ORDERPIPE_API_TOKEN") // when the gateway sets API_TOKENS
//	placed, err := c.PlaceOrderRetrying(ctx, client.OrderRequest{
//		RequestID: "cart-8812-checkout-1", UserID: 42, ActivityID: 1, ItemID: 10086, Quantity: 1,
//	}, client.Retry{Budget: 10 * time.Second})
//	switch {
//	case errors.Is(err, client.ErrSoldOut), errors.Is(err, client.ErrAlreadyPurchased):
//		// tell the shopper
//	case err != nil:
//		// client.IsRetriable(err): the outcome is unknown; retry later with the same requestId
//	default:
//		// placed.OrderNo is PENDING; follow it with GetOrder, then Pay or Cancel.
//		// placed.Replayed: this was a retry of a request already accepted.
//	}
//
// An answer the API documents as an error is a *Error (Status, Code,
// Message, RetryAfter), comparable with errors.Is to the Err* sentinels; a
// transport failure is returned as net/http reports it. It never retries on
// its own except in the Retrying methods, and every method takes a context.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one gateway (or a load balancer in front of several). Its
// fields may be set after New and before the first call; it is then safe
// for concurrent use.
type Client struct {
	// BaseURL is the gateway's scheme://host[:port], without a trailing slash.
	BaseURL string
	// HTTPClient sends the requests (nil: http.DefaultClient). Give one with
	// a Timeout, and a Transport sized for the load.
	HTTPClient *http.Client
	// Token is sent as Authorization: Bearer on the order API when set
	// (the gateway's API_TOKENS).
	Token string
	// AdminToken is sent as Authorization: Bearer on the admin API.
	AdminToken string
	// UserAgent, when set, is sent on every request.
	UserAgent string
}

// New returns a client of the gateway at baseURL.
func New(baseURL string) *Client { return &Client{BaseURL: strings.TrimRight(baseURL, "/")} }

// Response is a raw answer (Do): its status, headers and whole body.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// maxBody bounds how much of an answer is read: the largest the API sends
// is an activity page of 100 activities with up to 1000 items each.
const maxBody = 64 << 20

// Do sends one request to path (with its query) and returns the answer as
// it came, whatever its status; err is only a transport failure. body nil
// sends no body; contentType "" sends none. header adds or overrides
// headers (the tokens are not added: Do is for callers that send what they
// choose, tests of the API among them).
func (c *Client) Do(ctx context.Context, method, path, contentType string, body []byte, header http.Header) (*Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	for k, vs := range header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		// Cut mid-answer: as good as no answer.
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return &Response{Status: res.StatusCode, Header: res.Header, Body: raw}, nil
}

// call sends a JSON request with the given token and decodes a 2xx answer
// into out; any other answer is an *Error.
func (c *Client) call(ctx context.Context, method, path, token string, in, out any, opts ...CallOption) (*Response, error) {
	var body []byte
	contentType := ""
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return nil, fmt.Errorf("encoding %s %s: %w", method, path, err)
		}
		contentType = "application/json"
	}
	var header http.Header
	if token != "" {
		header = http.Header{"Authorization": {"Bearer " + token}}
	}
	for _, o := range opts {
		if header == nil {
			header = http.Header{}
		}
		o(header)
	}
	res, err := c.Do(ctx, method, path, contentType, body, header)
	if err != nil {
		return nil, err
	}
	if res.Status < 200 || res.Status > 299 {
		return res, errorOf(res.Status, res.Header.Get("Retry-After"), res.Body)
	}
	if out != nil {
		if err := json.Unmarshal(res.Body, out); err != nil {
			return res, fmt.Errorf("%s %s: decoding the %d answer: %w", method, path, res.Status, err)
		}
	}
	return res, nil
}

// OrderRequest is the body of POST /v1/orders.
type OrderRequest struct {
	RequestID  string `json:"requestId"`
	UserID     int64  `json:"userId"`
	ActivityID int64  `json:"activityId"`
	ItemID     int64  `json:"itemId"`
	Quantity   int    `json:"quantity"`
}

// Placed is an accepted order request: a 202, or a 200 replaying the first
// answer to the same requestId (Replayed).
type Placed struct {
	RequestID string `json:"requestId"`
	OrderNo   string `json:"orderNo"`
	Status    string `json:"status"`    // PENDING: follow it with GetOrder
	Remaining int64  `json:"remaining"` // stock left after the (first) reservation
	// Replayed is sent only when true: a 202 has no "replayed".
	Replayed bool `json:"replayed,omitempty"`
	// PayBy is when the closer may close the order unpaid (creation +
	// CLOSE_AFTER); pay before it.
	PayBy *time.Time `json:"payBy,omitempty"`
	// HTTPStatus is 202 (accepted now) or 200 (replayed).
	HTTPStatus int `json:"-"`
}

// PlaceOrder sends one POST /v1/orders. A refusal is an *Error (ErrSoldOut,
// ErrAlreadyPurchased, ErrKeyReused, ErrUnavailable, ...).
func (c *Client) PlaceOrder(ctx context.Context, r OrderRequest) (Placed, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return Placed{}, fmt.Errorf("encoding the order request: %w", err)
	}
	// The requestId goes as the Idempotency-Key too (an sf-string, quoted):
	// a retry while the first attempt runs is then told 409
	// IDEMPOTENCY_KEY_IN_PROGRESS at once, with Retry-After.
	header := http.Header{IdempotencyKeyHeader: {quoteKey(r.RequestID)}}
	if c.Token != "" {
		header.Set("Authorization", "Bearer "+c.Token)
	}
	res, err := c.Do(ctx, http.MethodPost, "/v1/orders", "application/json", body, header)
	if err != nil {
		return Placed{}, err
	}
	return ReadPlaced(res.Status, res.Header.Get("Retry-After"), res.Body)
}

// ReadPlaced reads an answer to POST /v1/orders (status, its Retry-After
// header and body): what PlaceOrder returns, for a caller that sends the
// request its own way (the load tool's raw connections).
func ReadPlaced(status int, retryAfter string, body []byte) (Placed, error) {
	if status != http.StatusAccepted && status != http.StatusOK {
		return Placed{}, errorOf(status, retryAfter, body)
	}
	var p Placed
	if err := json.Unmarshal(body, &p); err != nil || p.OrderNo == "" {
		return Placed{}, &Error{Status: status, Code: CodeUndecodable, Message: fmt.Sprintf("a %d answer without an orderNo: %.200q", status, body)}
	}
	p.HTTPStatus = status
	return p, nil
}

// Order is GET /v1/orders/{orderNo}.
type Order struct {
	OrderNo    string     `json:"orderNo"`
	RequestID  string     `json:"requestId"`
	UserID     int64      `json:"userId"`
	ActivityID int64      `json:"activityId"`
	ItemID     int64      `json:"itemId"`
	Quantity   int        `json:"quantity"`
	Status     string     `json:"status"` // PENDING, UNPAID, PAID, CLOSED, REJECTED
	Reason     string     `json:"reason,omitempty"`
	CreatedAt  time.Time  `json:"createdAt"`
	PaidAt     *time.Time `json:"paidAt,omitempty"`
	ClosedAt   *time.Time `json:"closedAt,omitempty"`
	// PayBy is the payment deadline of a PENDING or UNPAID order.
	PayBy *time.Time `json:"payBy,omitempty"`
}

// Order statuses.
const (
	StatusPending  = "PENDING"
	StatusUnpaid   = "UNPAID"
	StatusPaid     = "PAID"
	StatusClosed   = "CLOSED"
	StatusRejected = "REJECTED"
)

// GetOrder is GET /v1/orders/{orderNo}; an unknown orderNo is ErrOrderNotFound.
func (c *Client) GetOrder(ctx context.Context, orderNo string) (Order, error) {
	var o Order
	_, err := c.call(ctx, http.MethodGet, "/v1/orders/"+url.PathEscape(orderNo), c.Token, nil, &o)
	return o, err
}

// OrderStatus is GetOrder reduced to where the order is: the requestId it
// records and its status. Its types are the standard library's, so a
// caller may declare its own interface of it without importing this
// package (pkg/invariant does, to ask gateways about orders).
func (c *Client) OrderStatus(ctx context.Context, orderNo string) (requestID, status string, err error) {
	o, err := c.GetOrder(ctx, orderNo)
	return o.RequestID, o.Status, err
}

// Paid is the answer to a payment.
type Paid struct {
	OrderNo string `json:"orderNo"`
	Status  string `json:"status"` // PAID
}

// Pay is POST /v1/orders/{orderNo}/pay (idempotent): ErrOrderClosed,
// ErrOrderPending (not persisted yet: retry), ErrOrderNotFound.
func (c *Client) Pay(ctx context.Context, orderNo string, opts ...CallOption) (Paid, error) {
	var p Paid
	_, err := c.call(ctx, http.MethodPost, "/v1/orders/"+url.PathEscape(orderNo)+"/pay", c.Token, nil, &p, opts...)
	return p, err
}

// Cancelled is the answer to a cancellation.
type Cancelled struct {
	OrderNo string `json:"orderNo"`
	Status  string `json:"status"` // CLOSED
	Reason  string `json:"reason"` // CANCELLED
}

// Cancel is POST /v1/orders/{orderNo}/cancel by the order's buyer
// (idempotent): ErrOrderPaid, ErrOrderPending, ErrOrderNotFound (also when
// userID is not the buyer).
func (c *Client) Cancel(ctx context.Context, orderNo string, userID int64, opts ...CallOption) (Cancelled, error) {
	var out Cancelled
	in := struct {
		UserID int64 `json:"userId"`
	}{userID}
	_, err := c.call(ctx, http.MethodPost, "/v1/orders/"+url.PathEscape(orderNo)+"/cancel", c.Token, in, &out, opts...)
	return out, err
}

// Healthz is GET /healthz: nil when the process answers.
func (c *Client) Healthz(ctx context.Context) error {
	_, err := c.call(ctx, http.MethodGet, "/healthz", "", nil, nil)
	return err
}

// Readiness is the body of GET /readyz: "ok" or "unavailable", and each
// dependency's state. The gateway encodes it: Checks stays first, where
// its answers have always had it.
type Readiness struct {
	Checks map[string]string `json:"checks"`
	Status string            `json:"status"`
}

// Ready is GET /readyz. Not ready is an *Error with Status 503, Code
// UNAVAILABLE and the dependencies that failed in its Message; the
// Readiness is returned either way when the body says it.
func (c *Client) Ready(ctx context.Context) (Readiness, error) {
	res, err := c.Do(ctx, http.MethodGet, "/readyz", "", nil, nil)
	if err != nil {
		return Readiness{}, err
	}
	var r Readiness
	decodeErr := json.Unmarshal(res.Body, &r)
	if res.Status == http.StatusOK {
		return r, nil
	}
	e := errorOf(res.Status, res.Header.Get("Retry-After"), res.Body)
	if decodeErr == nil && res.Status == http.StatusServiceUnavailable {
		var down []string
		for dep, s := range r.Checks {
			if s != "ok" {
				down = append(down, dep)
			}
		}
		e.Code, e.Message = CodeUnavailable, "not ready: "+strings.Join(down, ", ")+" unavailable"
	}
	return r, e
}

// Metrics is GET /metrics: the Prometheus text exposition.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) { return c.text(ctx, "/metrics") }

// OpenAPI is GET /openapi.json: the description this client follows.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) { return c.text(ctx, "/openapi.json") }

func (c *Client) text(ctx context.Context, path string) ([]byte, error) {
	res, err := c.Do(ctx, http.MethodGet, path, "", nil, nil)
	if err != nil {
		return nil, err
	}
	if res.Status != http.StatusOK {
		return nil, errorOf(res.Status, res.Header.Get("Retry-After"), res.Body)
	}
	return res.Body, nil
}

// retryAfter parses a Retry-After of whole seconds (the only form the
// gateway sends); anything else is 0.
func retryAfter(v string) time.Duration {
	s, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || s < 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}
