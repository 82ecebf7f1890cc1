package gateway

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
)

// jsonInt is an integer field of a request body, read the way the OpenAPI
// document's JSON Schema "integer" reads it: by value, so 24, 24.0, 2.4e1
// and 240e-1 are all 24. A number with a fraction (24.5), one beyond int64
// (1e400), null, and anything not a number are refused, each with a
// *json.UnmarshalTypeError that encoding/json completes with the field's
// path (jsonError words it). set tells an absent field from a present one.
type jsonInt struct {
	v   int64
	set bool
}

// jsonInt64 is jsonInt where absent and 0 are one (the order body, whose
// checks refuse both): half the size, so the hot path's body stays small.
type jsonInt64 int64

func (n *jsonInt64) UnmarshalJSON(b []byte) error {
	v, problem := intOfJSON(b)
	if problem != "" {
		return &json.UnmarshalTypeError{Value: problem, Type: int64Type}
	}
	*n = jsonInt64(v)
	return nil
}

var int64Type = reflect.TypeFor[int64]()

// The Value of a refusal, which jsonError words.
const (
	notNumber   = "not a number"
	notInteger  = "a number with a fraction"
	outOfRange  = "a number out of range"
	nullNumber  = "null"
	maxExponent = 1 << 24 // far beyond any body's digits: a bigger one clamps
)

func (n *jsonInt) UnmarshalJSON(b []byte) error {
	v, problem := intOfJSON(b)
	if problem != "" {
		return &json.UnmarshalTypeError{Value: problem, Type: int64Type}
	}
	n.v, n.set = v, true
	return nil
}

// intOfJSON is the int64 the JSON value b (one the decoder has scanned)
// equals, or why there is none.
func intOfJSON(b []byte) (int64, string) {
	digits := b
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	// The common case, plain digits that cannot overflow, allocates nothing.
	if len(digits) > 0 && len(digits) <= 18 && allDigits(digits) {
		var v int64
		for _, c := range digits {
			v = v*10 + int64(c-'0')
		}
		if len(digits) < len(b) {
			v = -v
		}
		return v, ""
	}
	switch {
	case string(b) == "null":
		return 0, nullNumber
	case len(digits) == 0 || digits[0] < '0' || digits[0] > '9':
		return 0, notNumber
	}
	// A JSON number: int [. frac] [e|E [+|-] exp]. Its value is
	// mant × 10^exp with mant the digits of int and frac.
	intPart, rest := leadingDigits(digits)
	var frac []byte
	if len(rest) > 0 && rest[0] == '.' {
		frac, rest = leadingDigits(rest[1:])
	}
	exp := 0
	if len(rest) > 0 && (rest[0] == 'e' || rest[0] == 'E') {
		rest = rest[1:]
		negExp := len(rest) > 0 && rest[0] == '-'
		if len(rest) > 0 && (rest[0] == '-' || rest[0] == '+') {
			rest = rest[1:]
		}
		for _, c := range rest {
			exp = min(exp*10+int(c-'0'), maxExponent)
		}
		if negExp {
			exp = -exp
		}
	}
	mant := strings.TrimLeft(string(intPart)+string(frac), "0")
	exp -= len(frac)
	for len(mant) > 0 && mant[len(mant)-1] == '0' {
		mant = mant[:len(mant)-1]
		exp++
	}
	switch {
	case mant == "":
		return 0, ""
	case exp < 0:
		return 0, notInteger
	case len(mant)+exp > 19:
		return 0, outOfRange
	}
	s := mant + strings.Repeat("0", exp)
	if len(digits) < len(b) {
		s = "-" + s
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, outOfRange
	}
	return v, ""
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func leadingDigits(b []byte) (digits, rest []byte) {
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return b[:i], b[i:]
}
