package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"orderpipe/pkg/event"
	"orderpipe/pkg/stock"
)

// MaxBodyBytes is the contract's body limit for order requests.
const MaxBodyBytes = 4 << 10

// apiError is an answer other than success.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func invalid(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "INVALID_REQUEST", Message: fmt.Sprintf(format, args...)}
}

// orderRequest is the body of POST /v1/orders.
type orderRequest struct {
	RequestID  string `json:"requestId"`
	UserID     int64  `json:"userId"`
	ActivityID int64  `json:"activityId"`
	ItemID     int64  `json:"itemId"`
	Quantity   int    `json:"quantity"`
	// keyed: the requestId came with an Idempotency-Key header, whose
	// request answers 409 IDEMPOTENCY_KEY_IN_PROGRESS while its first
	// attempt is running (one without keeps its wait, then 503).
	keyed bool
}

// fingerprint identifies the payload, so a retry is told from a reused key.
func (o orderRequest) fingerprint() string {
	return stock.Fingerprint(o.UserID, o.ActivityID, o.ItemID, o.Quantity)
}

// orderBody is the wire form of an orderRequest (integers by value).
type orderBody struct {
	RequestID  bodyRequestID `json:"requestId"`
	UserID     jsonInt64     `json:"userId"`
	ActivityID jsonInt64     `json:"activityId"`
	ItemID     jsonInt64     `json:"itemId"`
	Quantity   jsonInt64     `json:"quantity"`
}

// bodyRequestID is the body's requestId; set says the body gave one (the
// Idempotency-Key header may stand in for a missing one, never for an empty
// one or a null, which are refused as any other wrong requestId).
type bodyRequestID struct {
	v   string
	set bool
}

func (r *bodyRequestID) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		return &json.UnmarshalTypeError{Value: "not a string", Type: reflect.TypeFor[string](), Field: "requestId"}
	}
	r.set = true
	return json.Unmarshal(b, &r.v)
}

// bodyBufs hold order bodies while they are decoded (nothing decoded
// keeps a reference to them).
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// parseOrderRequest decodes and validates an order request. It is pure, so
// the fuzzer can drive it: every failure is a 4xx apiError, never a panic.
func parseOrderRequest(contentType string, body io.Reader) (orderRequest, *apiError) {
	return parseKeyedOrderRequest(contentType, body, "")
}

// parseKeyedOrderRequest is parseOrderRequest for a request whose
// Idempotency-Key header gave key ("" : none): the key is the requestId,
// which the body may then leave out, but not contradict.
func parseKeyedOrderRequest(contentType string, body io.Reader, key string) (orderRequest, *apiError) {
	bp := bodyBufs.Get().(*[]byte)
	defer bodyBufs.Put(bp)
	raw, apiErr := readJSON(contentType, body, MaxBodyBytes, (*bp)[:0])
	if apiErr != nil {
		return orderRequest{}, apiErr
	}
	*bp = raw[:0]
	b, ok := fastOrderBody(raw)
	if !ok {
		if apiErr := decodeRawJSON(raw, &b); apiErr != nil {
			return orderRequest{}, apiErr
		}
	}
	var rid string
	switch {
	case key != "" && b.RequestID.set && b.RequestID.v != key:
		return orderRequest{}, invalid("the body's requestId differs from the Idempotency-Key header (%q, %q): send one, or both the same", b.RequestID.v, key)
	case key != "":
		rid = key
	case !b.RequestID.set:
		return orderRequest{}, invalid("no requestId: give it in the body or in the Idempotency-Key header")
	default:
		rid = b.RequestID.v
	}
	if err := validRequestID(rid); err != nil {
		return orderRequest{}, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"userId", int64(b.UserID)}, {"activityId", int64(b.ActivityID)}, {"itemId", int64(b.ItemID)}} {
		if f.v <= 0 {
			return orderRequest{}, invalid("%s must be a positive integer", f.name)
		}
	}
	if b.Quantity < 1 || b.Quantity > 100 {
		return orderRequest{}, invalid("quantity must be between 1 and 100")
	}
	return orderRequest{RequestID: rid, UserID: int64(b.UserID), ActivityID: int64(b.ActivityID), ItemID: int64(b.ItemID),
		Quantity: int(b.Quantity), keyed: key != ""}, nil
}

// decodeOrder is the order request of r, whose body is body: the JSON body
// and the Idempotency-Key header, if any.
func decodeOrder(r *http.Request, body io.Reader) (orderRequest, *apiError) {
	key, apiErr := idempotencyKey(r.Header)
	if apiErr != nil {
		return orderRequest{}, apiErr
	}
	return parseKeyedOrderRequest(r.Header.Get("Content-Type"), body, key)
}

// IdempotencyKeyHeader is the header of draft-ietf-httpapi-idempotency-key-header.
const IdempotencyKeyHeader = "Idempotency-Key"

// idempotencyKey is the request's Idempotency-Key ("" when it has none).
// The draft makes the value a Structured Field sf-string, "8e03978e-…"
// (quoted); a bare value is taken too, as Stripe's clients send it. Either
// way the key obeys the requestId rules, which need no escapes inside the
// quotes. The header twice (or a list) is refused: which one would count?
func idempotencyKey(h http.Header) (string, *apiError) {
	vs := h.Values(IdempotencyKeyHeader)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", invalid("Idempotency-Key header given %d times: send it once", len(vs))
	}
	v := strings.Trim(vs[0], " \t")
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	} else if strings.ContainsRune(v, '"') {
		return "", invalid("Idempotency-Key must be a quoted string (\"key\") or a bare key")
	}
	if len(v) < 1 || len(v) > 64 || !event.ValidRequestID(v) {
		return "", invalid("Idempotency-Key must be 1-64 characters of A-Z a-z 0-9 . _ : - (quoted or bare)")
	}
	return v, nil
}

// limitedBody is r's body, read at most limit+1 bytes far (decodeJSON
// refuses what passes limit), or 413 PAYLOAD_TOO_LARGE straight away when
// its Content-Length says it is over the limit: nothing of it is read, a
// client waiting on "Expect: 100-continue" gets the refusal, not a
// go-ahead, and the connection closes.
func limitedBody(w http.ResponseWriter, r *http.Request, limit int) (io.Reader, *apiError) {
	if r.ContentLength > int64(limit) {
		// The connection closes after the answer: otherwise net/http would
		// first read (and wait for) the unread body to keep it open.
		w.Header().Set("Connection", "close")
		return nil, tooLarge(limit)
	}
	return http.MaxBytesReader(w, r.Body, int64(limit)+1), nil
}

// decodeBody decodes r's body, a JSON object of at most limit bytes, into
// v (decodeJSON); a body refused is answered here.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int, v any) bool {
	body, apiErr := limitedBody(w, r, limit)
	if apiErr == nil {
		apiErr = decodeJSON(r.Header.Get("Content-Type"), body, limit, v)
	}
	if apiErr != nil {
		writeError(w, apiErr.Status, apiErr.Code, apiErr.Message)
		return false
	}
	return true
}

func tooLarge(limit int) *apiError {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "PAYLOAD_TOO_LARGE", Message: "body exceeds " + strconv.Itoa(limit) + " bytes"}
}

// decodeJSON reads one JSON object of at most limit bytes into v (a pointer
// to a struct), its keys and its objects' keys (checkKeys) each exactly one
// of their struct's names and none twice. Every failure is a 4xx naming
// what is wrong.
func decodeJSON(contentType string, body io.Reader, limit int, v any) *apiError {
	raw, apiErr := readJSON(contentType, body, limit, nil)
	if apiErr != nil {
		return apiErr
	}
	return decodeRawJSON(raw, v)
}

// readJSON reads a body of at most limit bytes declared as JSON in UTF-8
// and holding only UTF-8, appending it to buf.
func readJSON(contentType string, body io.Reader, limit int, buf []byte) ([]byte, *apiError) {
	if apiErr := jsonContentType(contentType); apiErr != nil {
		return nil, apiErr
	}
	raw, err := readAtMost(body, limit+1, buf)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || len(raw) > limit {
		return nil, tooLarge(limit)
	}
	if err != nil {
		// A body sent too slowly (the server's read deadline) or cut short:
		// what the client sent is not all of it, whatever the socket says.
		return nil, invalid("the body could not be read in full (sent too slowly, or shorter than its Content-Length)")
	}
	// encoding/json would read a byte that is not UTF-8 as U+FFFD: refused
	// instead, so no text is changed behind its sender's back.
	if !utf8.Valid(raw) {
		return nil, invalid("body is not valid UTF-8")
	}
	return raw, nil
}

// jsonContentType refuses a Content-Type other than application/json, or
// one that declares a charset other than UTF-8.
func jsonContentType(contentType string) *apiError {
	if contentType == "application/json" { // as nearly every client sends it
		return nil
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return &apiError{Status: http.StatusUnsupportedMediaType, Code: "UNSUPPORTED_MEDIA_TYPE",
			Message: "Content-Type must be application/json"}
	}
	// JSON is UTF-8 (RFC 8259); a body declared in another charset would be
	// read as something its sender did not mean.
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return &apiError{Status: http.StatusUnsupportedMediaType, Code: "UNSUPPORTED_MEDIA_TYPE",
			Message: "Content-Type must be application/json in UTF-8 (charset " + strconv.Quote(cs) + ")"}
	}
	return nil
}

// readAtMost appends r's bytes to buf until EOF or n of them.
func readAtMost(r io.Reader, n int, buf []byte) ([]byte, error) {
	start := len(buf)
	for len(buf)-start < n {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := r.Read(buf[len(buf):min(cap(buf), start+n)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// decodeRawJSON decodes raw as decodeJSON does.
func decodeRawJSON(raw []byte, v any) *apiError {
	end, apiErr := checkKeys(raw, shapeOf(v))
	if apiErr != nil {
		return apiErr
	}
	if err := json.Unmarshal(raw[:end], v); err != nil {
		return jsonError(err)
	}
	if len(bytes.TrimLeft(raw[end:], " \t\r\n")) > 0 {
		return invalid("body must hold exactly one JSON object")
	}
	return nil
}

func jsonError(err error) *apiError {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field == "" {
			return invalid("body must be a JSON object")
		}
		// "items.stock" is items[].stock: encoding/json names no index.
		field := typeErr.Field
		if rest, ok := strings.CutPrefix(field, "items."); ok {
			field = "items[]." + rest
		}
		switch typeErr.Value {
		case nullNumber:
			return invalid("%s must be an integer, not null", field)
		case notInteger:
			return invalid("%s must be an integer", field)
		case outOfRange:
			return invalid("%s is out of range", field)
		}
		return invalid("%s has the wrong type or is out of range", field)
	}
	// checkKeys has refused malformed JSON and unknown fields; anything
	// else is not worth showing a client.
	return invalid("malformed JSON")
}

func validRequestID(id string) *apiError {
	if len(id) < 1 || len(id) > 64 {
		return invalid("requestId must be 1-64 characters")
	}
	if !event.ValidRequestID(id) {
		return invalid("requestId may hold only A-Z a-z 0-9 . _ : -")
	}
	return nil
}
