package client

import (
	"crypto/rand"
	"net/http"
)

// IdempotencyKeyHeader is the header of draft-ietf-httpapi-idempotency-key-header.
const IdempotencyKeyHeader = "Idempotency-Key"

// CallOption adds to one call's request.
type CallOption func(http.Header)

// WithIdempotencyKey sends key as the call's Idempotency-Key (Pay, Cancel):
// the same key again gets the first answer again (its retry after a lost
// answer), 409 IDEMPOTENCY_KEY_IN_PROGRESS while the first runs, and 422
// IDEMPOTENCY_KEY_REUSED with another order or user. key holds 1–64 of
// A-Z a-z 0-9 . _ : - (NewIdempotencyKey makes one).
func WithIdempotencyKey(key string) CallOption {
	return func(h http.Header) { h.Set(IdempotencyKeyHeader, quoteKey(key)) }
}

// NewIdempotencyKey is a fresh random key (26 base32 characters, 128 bits).
func NewIdempotencyKey() string { return rand.Text() }

// quoteKey is key as the draft's Structured Field sf-string. A key within
// the rules needs no escape.
func quoteKey(key string) string { return `"` + key + `"` }
