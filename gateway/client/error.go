package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Code is an error code of the API (openapi.json's ErrorCode).
type Code string

// The codes the gateway answers (TestCodesAreTheContracts holds this list
// to openapi.json).
const (
	CodeInvalidRequest       Code = "INVALID_REQUEST"
	CodeUnauthorized         Code = "UNAUTHORIZED"
	CodeNotFound             Code = "NOT_FOUND"
	CodeMethodNotAllowed     Code = "METHOD_NOT_ALLOWED"
	CodeNotOnSale            Code = "NOT_ON_SALE"
	CodeOrderNotFound        Code = "ORDER_NOT_FOUND"
	CodeActivityNotFound     Code = "ACTIVITY_NOT_FOUND"
	CodeSoldOut              Code = "SOLD_OUT"
	CodeAlreadyPurchased     Code = "ALREADY_PURCHASED"
	CodeOrderClosed          Code = "ORDER_CLOSED"
	CodeOrderPaid            Code = "ORDER_PAID"
	CodeOrderPending         Code = "ORDER_PENDING"
	CodeOrderRejected        Code = "ORDER_REJECTED"
	CodeStockBelowSold       Code = "STOCK_BELOW_SOLD"
	CodeBucketsFixed         Code = "BUCKETS_FIXED"
	CodeItemPreheated        Code = "ITEM_PREHEATED"
	CodeSaleEnded            Code = "SALE_ENDED"
	CodePayloadTooLarge      Code = "PAYLOAD_TOO_LARGE"
	CodeUnsupportedMediaType Code = "UNSUPPORTED_MEDIA_TYPE"
	CodeKeyReused            Code = "IDEMPOTENCY_KEY_REUSED"
	CodeKeyInProgress        Code = "IDEMPOTENCY_KEY_IN_PROGRESS"
	CodeRateLimited          Code = "RATE_LIMITED"
	CodeInternal             Code = "INTERNAL"
	CodeUnavailable          Code = "UNAVAILABLE"
)

// CodeUndecodable is no code of the API: the answer had no error body the
// API documents (a proxy's page, a cut body, a 2xx without its fields).
const CodeUndecodable Code = "UNDECODABLE"

// Codes lists every code of the API, in openapi.json's order.
var Codes = []Code{CodeInvalidRequest, CodeUnauthorized, CodeNotFound, CodeMethodNotAllowed, CodeNotOnSale,
	CodeOrderNotFound, CodeActivityNotFound, CodeSoldOut, CodeAlreadyPurchased, CodeOrderClosed, CodeOrderPaid,
	CodeOrderPending, CodeOrderRejected, CodeStockBelowSold, CodeBucketsFixed, CodeItemPreheated, CodeSaleEnded, CodePayloadTooLarge,
	CodeUnsupportedMediaType, CodeKeyReused, CodeKeyInProgress, CodeRateLimited, CodeInternal, CodeUnavailable}

// Sentinels, one per code: errors.Is(err, ErrSoldOut) holds for any *Error
// of that code, whatever its status and message.
var (
	ErrInvalidRequest       = &Error{Code: CodeInvalidRequest}
	ErrUnauthorized         = &Error{Code: CodeUnauthorized}
	ErrNotFound             = &Error{Code: CodeNotFound}
	ErrMethodNotAllowed     = &Error{Code: CodeMethodNotAllowed}
	ErrNotOnSale            = &Error{Code: CodeNotOnSale}
	ErrOrderNotFound        = &Error{Code: CodeOrderNotFound}
	ErrActivityNotFound     = &Error{Code: CodeActivityNotFound}
	ErrSoldOut              = &Error{Code: CodeSoldOut}
	ErrAlreadyPurchased     = &Error{Code: CodeAlreadyPurchased}
	ErrOrderClosed          = &Error{Code: CodeOrderClosed}
	ErrOrderPaid            = &Error{Code: CodeOrderPaid}
	ErrOrderPending         = &Error{Code: CodeOrderPending}
	ErrOrderRejected        = &Error{Code: CodeOrderRejected}
	ErrStockBelowSold       = &Error{Code: CodeStockBelowSold}
	ErrBucketsFixed         = &Error{Code: CodeBucketsFixed}
	ErrItemPreheated        = &Error{Code: CodeItemPreheated}
	ErrSaleEnded            = &Error{Code: CodeSaleEnded}
	ErrPayloadTooLarge      = &Error{Code: CodePayloadTooLarge}
	ErrUnsupportedMediaType = &Error{Code: CodeUnsupportedMediaType}
	ErrKeyReused            = &Error{Code: CodeKeyReused}
	ErrKeyInProgress        = &Error{Code: CodeKeyInProgress}
	ErrRateLimited          = &Error{Code: CodeRateLimited}
	ErrInternal             = &Error{Code: CodeInternal}
	ErrUnavailable          = &Error{Code: CodeUnavailable}
)

// Error is an answer the API gives as an error: {"error":{"code","message"}}.
type Error struct {
	Status  int    // HTTP status
	Code    Code   // CodeUndecodable when the body was not the API's error body
	Message string // for people; may change
	// RetryAfter is the Retry-After header (429, 503, 409 ORDER_PENDING), 0 if absent.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return string(e.Code)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches a sentinel (or any *Error) of the same code; a target with a
// Status must match it too.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Status == 0 || t.Status == e.Status)
}

// ErrorBody is the body of every error answer, as the gateway writes it.
type ErrorBody struct {
	Error struct {
		Code    Code   `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// errorOf reads an error answer.
func errorOf(status int, retry string, body []byte) *Error {
	e := &Error{Status: status, RetryAfter: retryAfter(retry)}
	var b ErrorBody
	if json.Unmarshal(body, &b) != nil || b.Error.Code == "" {
		e.Code, e.Message = CodeUndecodable, fmt.Sprintf("%s answer without the API's error body: %.200q", http.StatusText(status), body)
		return e
	}
	e.Code, e.Message = b.Error.Code, b.Error.Message
	return e
}

// CodeOf is err's API code, or "" when err is no *Error (a transport
// failure, a cancelled context).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsRetriable says the same call may be sent again and may get another
// answer: no answer came (a transport failure or a timeout of this call),
// or the gateway said to retry (429, 5xx, 409 ORDER_PENDING, 409
// IDEMPOTENCY_KEY_IN_PROGRESS). For
// PlaceOrder, retry with the same requestId: a retry of an accepted request
// is a replay, never a second order. A cancelled ctx of the caller is not
// retriable.
func IsRetriable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var e *Error
	if !errors.As(err, &e) {
		return true
	}
	return e.Retriable()
}

// Retriable says the gateway answered to ask again: 429, 5xx, 409
// ORDER_PENDING, 409 IDEMPOTENCY_KEY_IN_PROGRESS. A caller that cannot name
// this package (one that declares its own small interface of the client)
// reads it with errors.As on interface{ Retriable() bool }.
func (e *Error) Retriable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500 || e.Code == CodeOrderPending || e.Code == CodeKeyInProgress
}
