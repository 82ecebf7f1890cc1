package gateway

import (
	"strings"
	"testing"
)

// TestIntegersByValue: an integer field takes every JSON number whose value
// is an integer in range, as the document's JSON Schema "integer" does, and
// refuses the rest naming the field.
func TestIntegersByValue(t *testing.T) {
	t.Parallel()
	order := func(q string) string {
		return `{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":` + q + `}`
	}
	for _, tc := range []struct {
		quantity string
		want     int // 0: refused
		message  string
	}{
		{"24", 24, ""}, {"24.0", 24, ""}, {"2.4e1", 24, ""}, {"2.4E+1", 24, ""}, {"240e-1", 24, ""},
		{"0.24e2", 24, ""}, {"24.000000", 24, ""}, {"1e2", 100, ""}, {"100.0", 100, ""},
		{"24.5", 0, "quantity must be an integer"}, {"2.45e1", 0, "quantity must be an integer"},
		{"1e-400", 0, "quantity must be an integer"}, {"1e400", 0, "quantity is out of range"},
		{"1e99999999999999999999", 0, "quantity is out of range"}, {"-1e400", 0, "quantity is out of range"},
		{"null", 0, "quantity must be an integer, not null"}, {`"24"`, 0, "quantity has the wrong type"},
		{"true", 0, "quantity has the wrong type"}, {"[24]", 0, "quantity has the wrong type"},
		{"0.0", 0, "quantity must be between 1 and 100"}, {"-0", 0, "quantity must be between 1 and 100"},
		{"1.01e2", 0, "quantity must be between 1 and 100"},
	} {
		t.Run(tc.quantity, func(t *testing.T) {
			req, apiErr := parseOrderRequest("application/json", strings.NewReader(order(tc.quantity)))
			switch {
			case tc.want != 0 && apiErr != nil:
				t.Fatalf("refused: %v", apiErr)
			case tc.want != 0 && req.Quantity != tc.want:
				t.Fatalf("quantity %d, want %d", req.Quantity, tc.want)
			case tc.want == 0 && apiErr == nil:
				t.Fatalf("accepted as %+v", req)
			case tc.want == 0 && (apiErr.Status != 400 || apiErr.Code != "INVALID_REQUEST" || !strings.HasPrefix(apiErr.Message, tc.message)):
				t.Fatalf("refused with %v, want 400 INVALID_REQUEST %q", apiErr, tc.message)
			}
		})
	}
	for _, tc := range []struct{ number, want string }{
		{"9223372036854775807", ""}, {"9223372036854775807.0", ""}, {"9.223372036854775807e18", ""},
		{"9223372036854775808", "userId is out of range"}, {"9.3e18", "userId is out of range"},
		{"1e19", "userId is out of range"}, {"-9223372036854775808", "userId must be a positive integer"},
	} {
		t.Run("userId"+tc.number, func(t *testing.T) {
			body := `{"requestId":"r-1","userId":` + tc.number + `,"activityId":1,"itemId":1,"quantity":1}`
			req, apiErr := parseOrderRequest("application/json", strings.NewReader(body))
			if tc.want == "" {
				if apiErr != nil || req.UserID != 9223372036854775807 {
					t.Fatalf("%s: %+v %v, want userId 9223372036854775807", tc.number, req, apiErr)
				}
				return
			}
			if apiErr == nil || !strings.HasPrefix(apiErr.Message, tc.want) {
				t.Fatalf("%s: %+v %v, want %q", tc.number, req, apiErr, tc.want)
			}
		})
	}
}

// TestActivityBodyIntegers: the activity upsert's integers, items' too, are
// read by value; null is refused where the schema has no null, and an
// item's stock is required.
func TestActivityBodyIntegers(t *testing.T) {
	t.Parallel()
	body := func(limit, item string) string {
		return `{"name":"s","startsAt":"2026-11-29T10:00:00Z","endsAt":"2026-11-29T11:00:00Z"` + limit + `,"items":[` + item + `]}`
	}
	parse := func(b string) (activityBody, *apiError) {
		var a activityBody
		if apiErr := decodeJSON("application/json", strings.NewReader(b), maxAdminBody, &a); apiErr != nil {
			return a, apiErr
		}
		_, apiErr := validActivity(1, a)
		return a, apiErr
	}
	for _, tc := range []struct{ name, body, want string }{
		{"IntegralFloats", body(`,"perUserLimit":2.0`, `{"itemId":7e0,"stock":2.4e1,"buckets":4.0}`), ""},
		{"LimitAbsentOrZero", body(`,"perUserLimit":0.0`, `{"itemId":7,"stock":24}`), ""},
		{"LowerCaseTimes", strings.ReplaceAll(strings.ReplaceAll(body("", `{"itemId":7,"stock":24}`), "T1", "t1"), "0Z", "0z"), ""},
		{"BucketsNull", body("", `{"itemId":7,"stock":24,"buckets":null}`), "items[].buckets must be an integer, not null"},
		{"StockNull", body("", `{"itemId":7,"stock":null}`), "items[].stock must be an integer, not null"},
		{"StockAbsent", body("", `{"itemId":7}`), "items[].stock is required"},
		{"LimitNull", body(`,"perUserLimit":null`, `{"itemId":7,"stock":24}`), "perUserLimit must be an integer, not null"},
		{"StockFraction", body("", `{"itemId":7,"stock":24.5}`), "items[].stock must be an integer"},
		{"StockHuge", body("", `{"itemId":7,"stock":1e400}`), "items[].stock is out of range"},
		{"ItemTwice", body("", `{"itemId":7,"stock":1},{"itemId":7.0,"stock":2}`), "items[].itemId must be unique"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, apiErr := parse(tc.body)
			if tc.want == "" {
				if apiErr != nil {
					t.Fatalf("refused: %v", apiErr)
				}
				return
			}
			if apiErr == nil || apiErr.Status != 400 || !strings.HasPrefix(apiErr.Message, tc.want) {
				t.Fatalf("%+v: %v, want 400 %q", a, apiErr, tc.want)
			}
		})
	}
	a, _ := parse(body(`,"perUserLimit":2.0`, `{"itemId":7e0,"stock":2.4e1,"buckets":4.0}`))
	act, apiErr := validActivity(1, a)
	if apiErr != nil || act.PerUserLimit != 2 || len(act.Items) != 1 || act.Items[0].ItemID != 7 || act.Items[0].InitialStock != 24 || act.Items[0].Buckets != 4 {
		t.Errorf("2.0, 7e0, 2.4e1, 4.0 read as %+v (%v), want limit 2, item 7, stock 24, 4 buckets", act, apiErr)
	}
}

// TestActivityName: a name is printable text with something visible in it:
// white space alone, invisible format characters alone (U+200B), control
// characters and line or paragraph separators are refused; letters of any
// script, an emoji sequence joined by U+200D and inner spaces of any kind
// are names.
func TestActivityName(t *testing.T) {
	t.Parallel()
	check := func(name string) *apiError {
		_, apiErr := validActivity(1, activityBody{Name: name, StartsAt: "2026-11-29T10:00:00Z", EndsAt: "2026-11-29T11:00:00Z",
			Items: []itemBody{{ItemID: jsonInt{1, true}, Stock: jsonInt{1, true}}}})
		return apiErr
	}
	for _, name := range []string{"双十一 秒杀", "Sale\u00a0one", "👨\u200d👩\u200d👧 sale", "a", "x\u3000y"} {
		if apiErr := check(name); apiErr != nil {
			t.Errorf("name %+q refused: %v", name, apiErr)
		}
	}
	for name, want := range map[string]string{
		" \t ": "name must not be blank", "\u200b": "name must not be blank", "\u200b\u200d \u3000": "name must not be blank",
		"a\u2028b": "name must be printable text", "a\u2029": "name must be printable text", "a\x01": "name must be printable text",
		"a\nb": "name must be printable text", "": "name must be 1-200 characters",
	} {
		if apiErr := check(name); apiErr == nil || apiErr.Status != 400 || apiErr.Message != want {
			t.Errorf("name %+q: %v, want 400 %q", name, apiErr, want)
		}
	}
}
