package gateway

// The order body as nearly every client writes it, read in one pass: in a
// sold-out flood, decoding the body is most of what a refusal costs the
// gateway. fastOrderBody takes only the plain shape — one object holding
// each of the five names once (any order, JSON whitespace between tokens),
// the requestId a string of the characters a requestId may hold (no
// escapes), each integer plain digits without sign, leading zero or
// fraction — and declines anything else, which the full decoding
// (decodeJSON: the key check, then encoding/json) then answers, with its
// error if it has one. So it decides nothing the full decoding would not:
// what it takes, the full decoding takes the same way (FuzzParseOrderRequest
// checks that on every input it tries).

// plainNames are the order body's names in the order of fastOrderBody's
// bits.
var plainNames = [...]string{"requestId", "userId", "activityId", "itemId", "quantity"}

// fastOrderBody is raw read as a plain order body; ok is false when raw is
// anything else (the full decoding answers it).
func fastOrderBody(raw []byte) (b orderBody, ok bool) {
	s := plainScan{data: raw}
	if !s.byte('{') {
		return b, false
	}
	var seen uint8
	for i := range len(plainNames) {
		if i > 0 && !s.byte(',') {
			return b, false
		}
		name, ok := s.name()
		if !ok || seen&(1<<name) != 0 || !s.byte(':') {
			return b, false
		}
		seen |= 1 << name
		if name == 0 {
			v, ok := s.requestID()
			if !ok {
				return b, false
			}
			b.RequestID = bodyRequestID{v: v, set: true}
			continue
		}
		n, ok := s.digits()
		if !ok {
			return b, false
		}
		switch name {
		case 1:
			b.UserID = jsonInt64(n)
		case 2:
			b.ActivityID = jsonInt64(n)
		case 3:
			b.ItemID = jsonInt64(n)
		case 4:
			b.Quantity = jsonInt64(n)
		}
	}
	if !s.byte('}') {
		return b, false
	}
	s.space()
	return b, s.i == len(raw)
}

// plainScan reads the plain shape's tokens; every method skips the JSON
// whitespace before its token.
type plainScan struct {
	data []byte
	i    int
}

func (s *plainScan) space() { s.i = skipSpace(s.data, s.i) }

// byte takes c.
func (s *plainScan) byte(c byte) bool {
	s.space()
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// name takes a quoted name spelled exactly as one of plainNames, and says
// which.
func (s *plainScan) name() (int, bool) {
	s.space()
	for n, want := range plainNames {
		end := s.i + len(want) + 2
		if end <= len(s.data) && s.data[s.i] == '"' && s.data[end-1] == '"' && string(s.data[s.i+1:end-1]) == want {
			s.i = end
			return n, true
		}
	}
	return 0, false
}

// requestID takes a quoted string of requestId characters (at most 64 of
// them: a longer one is the full decoding's to refuse).
func (s *plainScan) requestID() (string, bool) {
	if !s.byte('"') {
		return "", false
	}
	start := s.i
	for s.i < len(s.data) && s.i-start <= 64 && requestIDChar(s.data[s.i]) {
		s.i++
	}
	if s.i == start || s.i-start > 64 || s.i >= len(s.data) || s.data[s.i] != '"' {
		return "", false
	}
	v := string(s.data[start:s.i])
	s.i++
	return v, true
}

// requestIDChar: A-Z a-z 0-9 . _ : - (event.ValidRequestID's set).
func requestIDChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
}

// digits takes 1 to 18 digits, the first not 0 (so no overflow, and no
// number JSON refuses), ended by something that is not part of a number.
func (s *plainScan) digits() (int64, bool) {
	s.space()
	start := s.i
	var v int64
	for s.i < len(s.data) && s.i-start < 18 && '0' <= s.data[s.i] && s.data[s.i] <= '9' {
		v = v*10 + int64(s.data[s.i]-'0')
		s.i++
	}
	if s.i == start || s.data[start] == '0' || s.i < len(s.data) && isNumberByte(s.data[s.i]) {
		return 0, false
	}
	return v, true
}

// isNumberByte: a byte that could continue a JSON number.
func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}
