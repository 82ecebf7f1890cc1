package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
)

// The key check. encoding/json matches an object's keys to a struct's
// fields regardless of case (folded as Unicode does, so "requeſtId" is
// requestId) and lets a key given twice overwrite the first; the contract
// refuses unknown fields, and a key not spelled as it names it is one. So
// decodeJSON first scans the body once, checking it is one JSON value
// encoding/json would take and that each of its objects has only its
// struct's names, exactly, none twice; only then does encoding/json decode it.

// shape is what the key check knows of a JSON value: an object's names
// with the shape of each one's value, or an array's elements. A nil shape
// is any value: one encoding/json reads by itself (a string, a jsonInt) or
// whose wrong type it refuses.
type shape struct {
	object bool
	names  []string // an object's names, exactly as its struct's tags spell them
	values []*shape // values[i] is the shape of names[i]'s value
	elem   *shape   // an array's elements; nil for an object
}

var shapes sync.Map // reflect.Type → *shape

// shapeOf is the shape of what v (a pointer) decodes.
func shapeOf(v any) *shape {
	t := reflect.TypeOf(v)
	if sh, ok := shapes.Load(t); ok {
		return sh.(*shape)
	}
	sh := shapeOfType(t, map[reflect.Type]*shape{})
	shapes.Store(t, sh)
	return sh
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// shapeOfType follows encoding/json's reading of t; building tells the
// structs under way, so a type that holds itself ends.
func shapeOfType(t reflect.Type, building map[reflect.Type]*shape) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if elem := shapeOfType(t.Elem(), building); elem != nil {
			return &shape{elem: elem}
		}
	case reflect.Struct:
		if sh, ok := building[t]; ok {
			return sh
		}
		sh := &shape{object: true}
		building[t] = sh
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case f.Anonymous:
				panic("decodeJSON: embedded field " + f.Name + " of " + t.String() + ": not supported")
			case !f.IsExported() || name == "-" && f.Tag.Get("json") == "-":
				continue
			case name == "":
				name = f.Name
			}
			sh.names = append(sh.names, name)
			sh.values = append(sh.values, shapeOfType(f.Type, building))
		}
		if len(sh.names) > 64 {
			panic("decodeJSON: " + t.String() + " has more than 64 fields")
		}
		return sh
	}
	return nil
}

// maxDepth is encoding/json's limit on nested arrays and objects.
const maxDepth = 10000

// keyScan scans one JSON value. Its syntax is encoding/json's: a body the
// scan takes, encoding/json takes (FuzzKeyScanAgreesWithEncodingJSON).
type keyScan struct {
	data []byte
	i    int
	// bad is the first key refused; the scan goes on, as malformed JSON
	// is said so first whatever its keys.
	bad *apiError
}

// checkKeys scans the JSON value data starts with and returns where it
// ends, or why the body is refused: malformed JSON, not an object, or the
// first key of an object that is not exactly one of its names, or one
// given twice.
func checkKeys(data []byte, sh *shape) (int, *apiError) {
	s := keyScan{data: data}
	s.space()
	top := s.i
	if !s.value(sh, 0) {
		return 0, invalid("malformed JSON")
	}
	if data[top] != '{' {
		return 0, invalid("body must be a JSON object")
	}
	if s.bad != nil {
		return 0, s.bad
	}
	return s.i, nil
}

func (s *keyScan) space() { s.i = skipSpace(s.data, s.i) }

// skipSpace is the index of the first byte from i on that is not JSON
// white space.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value scans the value at s.i, after white space, and reports whether it
// is valid JSON. depth is how many arrays and objects hold it.
func (s *keyScan) value(sh *shape, depth int) bool {
	s.space()
	if s.i >= len(s.data) {
		return false
	}
	switch c := s.data[s.i]; {
	case c == '{':
		return s.object(sh, depth+1)
	case c == '[':
		return s.array(sh, depth+1)
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

func (s *keyScan) object(sh *shape, depth int) bool {
	if depth > maxDepth {
		return false
	}
	if sh != nil && !sh.object {
		sh = nil // an array's shape: the decode refuses the object
	}
	s.i++ // {
	s.space()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return true
	}
	var seen uint64 // bit i: names[i] was given
	for {
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return false
		}
		start := s.i
		key, escaped, ok := s.str()
		if !ok {
			return false
		}
		var val *shape
		if sh != nil && s.bad == nil {
			val = s.field(sh, key, s.data[start:s.i], escaped, &seen)
		}
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return false
		}
		s.i++
		if done, ok := s.member(val, depth, '}'); done || !ok {
			return ok
		}
	}
}

// field checks key, a key of an object of shape sh (quoted: as written,
// quotes and all), and returns the shape of its value. seen tells the names
// given before.
func (s *keyScan) field(sh *shape, key, quoted []byte, escaped bool, seen *uint64) *shape {
	if escaped {
		key = []byte(keyName(quoted))
	}
	i := -1
	for j, n := range sh.names {
		if string(key) == n {
			i = j
			break
		}
	}
	switch {
	case i < 0:
		s.bad = unknownField(keyName(quoted), sh)
	case *seen&(1<<i) != 0:
		s.bad = invalid("duplicate field %q", keyName(quoted))
	default:
		*seen |= 1 << i
		return sh.values[i]
	}
	return nil
}

// keyName is the key quoted (a JSON string the scan took) as encoding/json
// reads it: escapes undone, bytes not UTF-8 replaced by U+FFFD.
func keyName(quoted []byte) string {
	var name string
	_ = json.Unmarshal(quoted, &name)
	return name
}

// unknownField refuses name, saying which name it misspells by case.
func unknownField(name string, sh *shape) *apiError {
	for _, n := range sh.names {
		if strings.EqualFold(n, name) {
			return invalid("unknown field %q (names are case-sensitive: %q)", name, n)
		}
	}
	return invalid("unknown field %q", name)
}

func (s *keyScan) array(sh *shape, depth int) bool {
	if depth > maxDepth {
		return false
	}
	var elem *shape
	if sh != nil {
		elem = sh.elem // nil for an object's shape: the decode refuses the array
	}
	s.i++ // [
	s.space()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if done, ok := s.member(elem, depth, ']'); done || !ok {
			return ok
		}
	}
}

// member scans an object's or an array's value at s.i and what follows
// it: a comma, or end, the container's closing byte (done). ok is false
// for anything else, or a value that is not valid JSON.
func (s *keyScan) member(sh *shape, depth int, end byte) (done, ok bool) {
	if !s.value(sh, depth) {
		return false, false
	}
	s.space()
	if s.i >= len(s.data) {
		return false, false
	}
	switch s.data[s.i] {
	case ',':
		s.i++
		return false, true
	case end:
		s.i++
		return true, true
	}
	return false, false
}

// str scans the string at s.i and returns what is between its quotes, and
// whether that has an escape. Like encoding/json it takes any byte from
// 0x20 up but the quote and the backslash, valid UTF-8 or not.
func (s *keyScan) str() (raw []byte, escaped, ok bool) {
	s.i++ // "
	start := s.i
	for s.i < len(s.data) {
		switch c := s.data[s.i]; {
		case c == '"':
			s.i++
			return s.data[start : s.i-1], escaped, true
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.data) {
				return nil, false, false
			}
			switch s.data[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+5 >= len(s.data) || !isHex(s.data[s.i+2]) || !isHex(s.data[s.i+3]) || !isHex(s.data[s.i+4]) || !isHex(s.data[s.i+5]) {
					return nil, false, false
				}
				s.i += 6
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		default:
			s.i++
		}
	}
	return nil, false, false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *keyScan) number() bool {
	d, i := s.data, s.i
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	s.i = i
	return true
}

func (s *keyScan) literal(word string) bool {
	if len(s.data)-s.i < len(word) || string(s.data[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}
