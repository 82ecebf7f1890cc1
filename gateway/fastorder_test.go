package gateway

import "testing"

// TestFastOrderBody: the one-pass reading takes the plain order body in
// any key order and whitespace, reading it as the full decoding does, and
// declines every other shape, leaving it to the full decoding (which then
// answers it, refusal or not).
func TestFastOrderBody(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1}`,
		" {\n\t\"quantity\" : 100 ,\"itemId\":7,\"activityId\":9, \"userId\":123456789012345678,\"requestId\":\"a.B_c:d-9\"}\r\n",
		`{"requestId":"` + string(make64('x')) + `","userId":1,"activityId":1,"itemId":1,"quantity":1}`,
	} {
		fast, ok := fastOrderBody([]byte(body))
		if !ok {
			t.Fatalf("%q: declined", body)
		}
		var full orderBody
		if apiErr := decodeRawJSON([]byte(body), &full); apiErr != nil || full != fast {
			t.Fatalf("%q: plain %+v, full %+v %v", body, fast, full, apiErr)
		}
	}
	for _, body := range []string{
		``, `{}`, `[]`, `null`,
		`{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086}`,                                  // one missing
		`{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1,"x":1}`,               // one more
		`{"requestId":"r-1","userId":42,"userId":42,"activityId":1,"itemId":10086,"quantity":1}`,         // twice
		`{"requestId":"r-1","UserId":42,"activityId":1,"itemId":10086,"quantity":1}`,                     // case
		`{"requestId":"r-1","\u0075serId":42,"activityId":1,"itemId":10086,"quantity":1}`,                // escaped name
		`{"requestId":"r\u002d1","userId":42,"activityId":1,"itemId":10086,"quantity":1}`,                // escaped value
		`{"requestId":"r 1","userId":42,"activityId":1,"itemId":10086,"quantity":1}`,                     // a character a requestId may not hold
		`{"requestId":"","userId":42,"activityId":1,"itemId":10086,"quantity":1}`,                        // empty
		`{"requestId":"` + string(make64('x')) + `x","userId":1,"activityId":1,"itemId":1,"quantity":1}`, // 65
		`{"requestId":null,"userId":42,"activityId":1,"itemId":10086,"quantity":1}`,                      // null
		`{"requestId":"r-1","userId":-42,"activityId":1,"itemId":10086,"quantity":1}`,                    // sign
		`{"requestId":"r-1","userId":042,"activityId":1,"itemId":10086,"quantity":1}`,                    // leading zero
		`{"requestId":"r-1","userId":0,"activityId":1,"itemId":10086,"quantity":1}`,                      // zero
		`{"requestId":"r-1","userId":42.0,"activityId":1,"itemId":10086,"quantity":1}`,                   // fraction
		`{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1e0}`,                   // exponent
		`{"requestId":"r-1","userId":1234567890123456789,"activityId":1,"itemId":10086,"quantity":1}`,    // 19 digits
		`{"requestId":"r-1","userId":"42","activityId":1,"itemId":10086,"quantity":1}`,                   // string
		`{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1}{}`,                   // trailing
		`{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1,}`,                    // trailing comma
		"{\"requestId\":\"r-1\",\"userId\":42,\"activityId\":1,\"itemId\":10086,\"quantity\":1}\v",       // not JSON whitespace
		"\ufeff{\"requestId\":\"r-1\",\"userId\":42,\"activityId\":1,\"itemId\":10086,\"quantity\":1}",   // BOM
	} {
		if b, ok := fastOrderBody([]byte(body)); ok {
			t.Errorf("%q: taken as %+v", body, b)
		}
	}
}

func make64(c byte) []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return b
}
