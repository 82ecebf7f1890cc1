package gateway

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"orderpipe/gateway/client"
)

// recorder remembers the status and error code a handler answered with.
type recorder struct {
	http.ResponseWriter
	status int
	code   string
}

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// writeJSON answers v as JSON (one line) with its Content-Length.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only plain data types reach here
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"INTERNAL","message":"internal error"}}`)
	}
	b = append(b, '\n')
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

var contentTypeJSON = []string{"application/json"}

func writeError(w http.ResponseWriter, status int, code, message string) {
	switch rec := w.(type) {
	case *recorder:
		rec.code = code
	case *answerBuffer:
		rec.code = code
	}
	if (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests) && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	if f, ok := fixedErrors[code]; ok && f.message == message {
		h := w.Header()
		h["Content-Type"], h["Content-Length"] = contentTypeJSON, f.length
		w.WriteHeader(status)
		_, _ = w.Write(f.body)
		return
	}
	var body client.ErrorBody
	body.Error.Code, body.Error.Message = client.Code(code), message
	writeJSON(w, status, body)
}

// fixedError is an error answer encoded once, as writeJSON encodes it.
type fixedError struct {
	message string
	body    []byte
	length  []string // Content-Length
}

// fixedErrors are the refusals a flood gets (by code, with their one
// message), encoded once: writeError answers them without encoding.
var fixedErrors = func() map[string]fixedError {
	m := map[string]fixedError{}
	for _, e := range [][2]string{
		{"SOLD_OUT", msgSoldOut}, {"NOT_ON_SALE", msgNotOnSale}, {"ALREADY_PURCHASED", msgAlreadyPurchased},
	} {
		var body client.ErrorBody
		body.Error.Code, body.Error.Message = client.Code(e[0]), e[1]
		b, err := json.Marshal(body)
		if err != nil {
			panic(err)
		}
		b = append(b, '\n')
		m[e[0]] = fixedError{message: e[1], body: b, length: []string{strconv.Itoa(len(b))}}
	}
	return m
}()

// The messages of the refusals a flood gets.
const (
	msgSoldOut          = "not enough stock"
	msgNotOnSale        = "activity item is not on sale"
	msgAlreadyPurchased = "user already holds a live order for this activity item"
)

// api guards the order API with service tokens when API_TOKENS is set.
func (s *Server) api(h http.HandlerFunc) http.HandlerFunc {
	if len(s.cfg.APITokens) == 0 {
		return h
	}
	wants := make([][]byte, len(s.cfg.APITokens))
	for i, t := range s.cfg.APITokens {
		wants[i] = []byte(t)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		got := bearerToken(r)
		ok := 0
		for _, want := range wants { // every token compared: no early exit to time
			ok |= subtle.ConstantTimeCompare(got, want)
		}
		if ok != 1 {
			unauthorized(w, "the order API needs Authorization: Bearer <one of API_TOKENS>")
			return
		}
		h(w, r)
	}
}

// bearerToken is the token of the request's one Authorization header of
// the Bearer scheme (RFC 6750: the scheme's name in any case, then one or
// more spaces); nil without one, or with several headers.
func bearerToken(r *http.Request) []byte {
	vs := r.Header.Values("Authorization")
	if len(vs) != 1 {
		return nil
	}
	scheme, token, ok := strings.Cut(vs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	if token = strings.TrimLeft(token, " "); token == "" {
		return nil
	}
	return []byte(token)
}

// unauthorized answers 401 with the challenge RFC 9110 asks of every 401.
func unauthorized(w http.ResponseWriter, message string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="orderpipe"`)
	writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", message)
}
