package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseOrderRequest: whatever the body and content type, decoding never
// panics and never answers anything but a 4xx with a code and a message. A
// body taken is one JSON object whose keys are each exactly one of the
// contract's names, none twice; a JSON object with a key that is not, or is
// twice, is refused naming the first such key — as encoding/json's own
// tokenizer reads the body (firstKeyProblem), not as the gateway's scan does.
// `make fuzz` runs it for a while; `go test` runs the seed corpus.
func FuzzParseOrderRequest(f *testing.F) {
	seeds := []string{
		`{"requestId":"r-123","userId":42,"activityId":1,"itemId":10086,"quantity":1}`,
		`{"requestId":"r-123","userId":42,"activityId":1,"itemId":10086,"quantity":1}{}`,
		`{"requestId":"","userId":-1,"activityId":0,"itemId":1e99,"quantity":1.5}`,
		`{"requestId":"r","userId":9223372036854775807,"activityId":1,"itemId":1,"quantity":100,"x":1}`,
		`[]`, `null`, `"str"`, `{`, ``, "\x00\xff", `{"requestId":"\u0000"}`,
		`{"requestId":"` + strings.Repeat("a", 5000) + `"}`,
		`{"REQUESTID":"r-1","UserId":42,"activityid":1,"ITEMID":10086,"Quantity":1}`,
		`{"requestId":"r-1","userId":1,"userId":2,"activityId":1,"itemId":10086,"quantity":1}`,
		`{"requestId":"r-1","\u0075serId":42,"activityId":1,"itemId":10086,"quantity":1}`,
		`{"requestId":"r-1","userId":42,"\u0075serId":42,"activityId":1,"itemId":10086,"quantity":1}`,
		`{"requeſtId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1}`,
		` { "quantity" : 2 ,"itemId":7,"activityId":1, "userId":123456789012345678,"requestId":"a.b_c:d-E"}` + "\n",
		`{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1e0}`,
		`{"requestId":"r-1","userId":042,"activityId":1,"itemId":10086,"quantity":1}`,
		`{"requestId":"r-1","userId":1234567890123456789,"activityId":1,"itemId":10086,"quantity":1}`,
		"{\"user\xffId\":1,\"user\xffId\":1}", ` null `, `{"quantity":{"a":1,"a":2}}`,
	}
	for _, s := range seeds {
		f.Add("application/json", []byte(s))
	}
	f.Add("application/json; charset=utf-8", []byte(seeds[0]))
	f.Add("text/plain", []byte(seeds[0]))
	f.Add("", []byte(seeds[0]))
	orderNames := keyNames{"requestId": nil, "userId": nil, "activityId": nil, "itemId": nil, "quantity": nil}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		// The plain shape's one-pass reading takes nothing the full
		// decoding would refuse or read otherwise.
		if fast, ok := fastOrderBody(body); ok {
			var full orderBody
			if apiErr := decodeRawJSON(body, &full); apiErr != nil || full != fast || !utf8.Valid(body) {
				t.Fatalf("%q: the plain reading took %+v, the full decoding %+v, %v", body, fast, full, apiErr)
			}
		}
		req, apiErr := parseOrderRequest(contentType, bytes.NewReader(body))
		problem, isObject := firstKeyProblem(body, orderNames)
		if apiErr == nil {
			if validRequestID(req.RequestID) != nil || req.UserID <= 0 || req.ActivityID <= 0 || req.ItemID <= 0 ||
				req.Quantity < 1 || req.Quantity > 100 || len(body) > MaxBodyBytes || !utf8.Valid(body) {
				t.Fatalf("accepted an invalid request %+v from %q", req, body)
			}
			if !isObject || problem != "" {
				t.Fatalf("accepted %+v from %q: object %t, %s", req, body, isObject, problem)
			}
			return
		}
		if apiErr.Status < 400 || apiErr.Status > 499 || apiErr.Code == "" || apiErr.Message == "" {
			t.Fatalf("bad rejection %+v for %q", apiErr, body)
		}
		if apiErr.Status != 400 {
			return // content type or size: the body was not read as JSON
		}
		if !utf8.Valid(body) {
			if apiErr.Message != "body is not valid UTF-8" {
				t.Fatalf("%q, not UTF-8, refused with %q", body, apiErr.Message)
			}
			return
		}
		keyRefusal := strings.HasPrefix(apiErr.Message, "unknown field ") || strings.HasPrefix(apiErr.Message, "duplicate field ")
		switch {
		case isObject && problem != "" && !strings.HasPrefix(apiErr.Message, problem):
			t.Fatalf("%q refused with %q, want %q", body, apiErr.Message, problem)
		case (!isObject || problem == "") && keyRefusal:
			t.Fatalf("%q refused with %q, but its keys are right", body, apiErr.Message)
		}
	})
}

// keyNames is what a body's objects may hold, written out apart from the
// structs they decode into: each name with, where its value is an array of
// objects, their names (nil: a value holding no object the contract names).
type keyNames map[string]keyNames

// firstKeyProblem walks the JSON object body starts with by encoding/json's
// tokenizer and returns the refusal its first key that is not exactly one
// of names, or is one twice, earns ("" if none); isObject is false when
// body does not start with a valid JSON object.
func firstKeyProblem(body []byte, names keyNames) (problem string, isObject bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // 1e700 is JSON; only its conversion to a float64 fails
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	problem, err := walkObject(dec, names)
	return problem, err == nil
}

// walkObject reads an object's members and its '}'; names nil is any.
func walkObject(dec *json.Decoder, names keyNames) (string, error) {
	seen := map[string]bool{}
	return walkMembers(dec, func(tok json.Token) (string, error) {
		key := tok.(string)
		sub, known := names[key]
		problem := ""
		switch {
		case names == nil:
		case !known:
			problem = fmt.Sprintf("unknown field %q", key)
		case seen[key]:
			problem = fmt.Sprintf("duplicate field %q", key)
		}
		seen[key] = true
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		p, err := walkValue(dec, tok, sub)
		if problem == "" {
			problem = p
		}
		return problem, err
	})
}

// walkValue reads the rest of the value whose first token is tok; elems,
// if not nil, are the names of the objects it holds as an array.
func walkValue(dec *json.Decoder, tok json.Token, elems keyNames) (string, error) {
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, nil)
	case json.Delim('['):
		return walkMembers(dec, func(tok json.Token) (string, error) {
			if tok == json.Delim('{') && elems != nil {
				return walkObject(dec, elems)
			}
			return walkValue(dec, tok, nil)
		})
	}
	return "", nil
}

// walkMembers reads an object's or an array's members, each by member
// given its first token, and the closing delimiter; the problem is the
// first member's that has one.
func walkMembers(dec *json.Decoder, member func(tok json.Token) (string, error)) (string, error) {
	problem := ""
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		p, err := member(tok)
		if err != nil {
			return "", err
		}
		if problem == "" {
			problem = p
		}
	}
	_, err := dec.Token()
	return problem, err
}

// FuzzKeyScanAgreesWithEncodingJSON: the key check's scan takes exactly the
// JSON encoding/json takes (json.Valid), whatever shape it checks against,
// and the value it scans ends where encoding/json's would.
func FuzzKeyScanAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1}`,
		`{"name":"s","items":[{"itemId":7,"stock":1},{"itemId":8,"stock":2,"stock":3}],"ITEMS":null}`,
		``, ` `, `{}`, `[]`, `{,}`, `[,]`, `[1,]`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{1:2}`, `[1 2]`, `{"a":1 "b":2}`,
		`0`, `-0`, `-`, `01`, `1.`, `.5`, `1e`, `1e+`, `1E-7`, `-1.5e+10`, `2.`, `1.e5`, `0x1`, `+1`, `Infinity`, `NaN`,
		`true`, `tru`, `truex`, `null`, `nul`, `nulll`, `false`, `False`,
		`"a"`, `"`, `"\"`, `"\u12"`, `"\u12G4"`, `"\uD834\uDD1E"`, `"\x41"`, `"\/"`, "\"\x1f\"", "\"\x7f\"", "\"\xff\xfe\"",
		"\xef\xbb\xbf{}", "{}\x00", `{} {}`, `{}x`, " \t\r\n{} \t\r\n", "\v{}", "\u00a0{}",
		strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
		strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
		strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth),
		strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1),
	} {
		f.Add([]byte(s))
	}
	shapes := []*shape{nil, shapeOf(&orderBody{}), shapeOf(&activityBody{})}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, sh := range shapes {
			s := keyScan{data: data}
			ok := s.value(sh, 0)
			end := s.i
			s.space()
			if whole, valid := ok && s.i == len(data), json.Valid(data); whole != valid {
				t.Fatalf("%q: the scan takes it %t, json.Valid %t", data, whole, valid)
			}
			if ok && !json.Valid(data[:end]) {
				t.Fatalf("%q: the scan took %q, which json.Valid does not", data, data[:end])
			}
		}
	})
}
