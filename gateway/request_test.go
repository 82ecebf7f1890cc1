package gateway

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"orderpipe/gateway/client"
	"orderpipe/pkg/telemetry"
)

// TestBodyKeysExact: every body decodeJSON reads (the order, the cancel,
// the activity upsert with its items) takes a key only spelled exactly as
// the contract names it, and only once in its object, at any depth; the
// body itself must be one JSON object. Each refusal is 400 INVALID_REQUEST
// naming the key, from the handler too; malformed JSON is still called so
// whatever its keys.
func TestBodyKeysExact(t *testing.T) {
	t.Parallel()
	const (
		order    = `{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1}`
		orderNo  = "1-10086-mx1ir84j7901087d0b53"
		activity = `{"name":"s","startsAt":"2026-11-29T10:00:00Z","endsAt":"2026-11-29T11:00:00Z","perUserLimit":1,"items":[%s]}`
	)
	withItems := func(items string) string { return strings.Replace(activity, "%s", items, 1) }
	type endpoint struct{ method, path string }
	var (
		orders = endpoint{http.MethodPost, "/v1/orders"}
		cancel = endpoint{http.MethodPost, "/v1/orders/" + orderNo + "/cancel"}
		upsert = endpoint{http.MethodPut, "/admin/v1/activities/1"}
	)
	for _, tc := range []struct {
		name string
		at   endpoint
		body string
		want string // "": taken; else the refusal's message
	}{
		{"OrderExact", orders, order, ""},
		{"OrderSpacedOut", orders, " \r\n\t" + strings.ReplaceAll(order, ",", " ,\n ") + "\n", ""},
		{"OrderKeyEscaped", orders, `{"requestId":"r-1","\u0075serId":42,"activityId":1,"itemId":10086,"quantity":1}`, ""},
		{"OrderEveryCase", orders, `{"REQUESTID":"r-1","UserId":42,"activityid":1,"ITEMID":10086,"Quantity":1}`,
			`unknown field "REQUESTID" (names are case-sensitive: "requestId")`},
		{"OrderOneKeyCapitalised", orders, strings.Replace(order, `"userId"`, `"UserId"`, 1),
			`unknown field "UserId" (names are case-sensitive: "userId")`},
		// encoding/json folds case as Unicode does: the long s (U+017F) is an s.
		{"OrderLongS", orders, strings.Replace(order, `"requestId"`, `"requeſtId"`, 1), `unknown field "requeſtId"`},
		{"OrderUnknown", orders, strings.Replace(order, `}`, `,"price":1}`, 1), `unknown field "price"`},
		{"OrderKeyTwice", orders, `{"userId":1,"userId":2,"requestId":"r-1","activityId":1,"itemId":10086,"quantity":1}`,
			`duplicate field "userId"`},
		{"OrderKeyTwiceSameValue", orders, strings.Replace(order, `}`, `,"quantity":1}`, 1), `duplicate field "quantity"`},
		{"OrderKeyTwiceEscaped", orders, strings.Replace(order, `}`, `,"\u0071uantity":1}`, 1), `duplicate field "quantity"`},
		{"OrderFirstProblemNamed", orders, `{"requestId":"r-1","requestId":"r-2","Quantity":1}`, `duplicate field "requestId"`},
		{"OrderNull", orders, `null`, "body must be a JSON object"},
		{"OrderNullSpaced", orders, " null\n", "body must be a JSON object"},
		{"OrderArray", orders, `[` + order + `]`, "body must be a JSON object"},
		{"OrderNumber", orders, `42`, "body must be a JSON object"},
		{"OrderString", orders, `"r-1"`, "body must be a JSON object"},
		{"OrderTrue", orders, `true`, "body must be a JSON object"},
		{"OrderMalformedWithBadKey", orders, `{"USERID":1,`, "malformed JSON"},
		{"OrderMalformedAfterKeyTwice", orders, `{"userId":1,"userId":2,]`, "malformed JSON"},
		{"OrderTwoObjects", orders, order + `{}`, "body must hold exactly one JSON object"},
		{"OrderWrongTypeObject", orders, strings.Replace(order, `"quantity":1`, `"quantity":{"a":1,"a":2}`, 1),
			"quantity has the wrong type"},
		{"OrderEmpty", orders, ``, "malformed JSON"},

		{"CancelExact", cancel, `{"userId":42}`, ""},
		{"CancelCase", cancel, `{"UserID":42}`, `unknown field "UserID" (names are case-sensitive: "userId")`},
		{"CancelKeyTwice", cancel, `{"userId":42,"userId":42}`, `duplicate field "userId"`},
		{"CancelNull", cancel, `null`, "body must be a JSON object"},

		{"UpsertExact", upsert, withItems(`{"itemId":7,"stock":1},{"itemId":8,"stock":2,"buckets":2}`), ""},
		{"UpsertEmptyItem", upsert, withItems(`{}`), "items[].itemId must be a positive integer"},
		{"UpsertCase", upsert, strings.Replace(withItems(`{"itemId":7,"stock":1}`), `"startsAt"`, `"StartsAt"`, 1),
			`unknown field "StartsAt" (names are case-sensitive: "startsAt")`},
		{"UpsertItemsCase", upsert, strings.Replace(withItems(`{"itemId":7,"stock":1}`), `"items"`, `"ITEMS"`, 1),
			`unknown field "ITEMS" (names are case-sensitive: "items")`},
		{"UpsertItemKeyCase", upsert, withItems(`{"itemId":7,"stock":1},{"ItemId":8,"stock":2}`),
			`unknown field "ItemId" (names are case-sensitive: "itemId")`},
		{"UpsertItemUnknown", upsert, withItems(`{"itemId":7,"stock":1,"price":3}`), `unknown field "price"`},
		{"UpsertKeyTwice", upsert, strings.Replace(withItems(`{"itemId":7,"stock":1}`), `{`, `{"name":"t",`, 1), `duplicate field "name"`},
		{"UpsertItemKeyTwice", upsert, withItems(`{"itemId":7,"stock":1},{"itemId":8,"stock":2,"stock":3}`), `duplicate field "stock"`},
		{"UpsertItemsTwice", upsert, strings.TrimSuffix(withItems(`{"itemId":7,"stock":1}`), "}") + `,"items":[{"itemId":8,"stock":2}]}`,
			`duplicate field "items"`},
		{"UpsertNull", upsert, `null`, "body must be a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var apiErr *apiError
			switch tc.at {
			case orders:
				_, apiErr = parseOrderRequest("application/json", strings.NewReader(tc.body))
			case cancel:
				var req cancelRequest
				apiErr = decodeJSON("application/json", strings.NewReader(tc.body), MaxBodyBytes, &req)
			case upsert:
				var a activityBody
				if apiErr = decodeJSON("application/json", strings.NewReader(tc.body), maxAdminBody, &a); apiErr == nil {
					_, apiErr = validActivity(1, a)
				}
			}
			if tc.want == "" {
				if apiErr != nil {
					t.Fatalf("refused %s: %v", tc.body, apiErr)
				}
				return
			}
			if apiErr == nil || apiErr.Status != http.StatusBadRequest || apiErr.Code != "INVALID_REQUEST" || !strings.HasPrefix(apiErr.Message, tc.want) {
				t.Fatalf("%s: %v, want 400 INVALID_REQUEST %q", tc.body, apiErr, tc.want)
			}
			// The endpoint answers the same: every caller decodes with the check.
			code, got := mustAnswerError(t, tc.at.method, tc.at.path, tc.body)
			if code != http.StatusBadRequest || got.Error.Code != "INVALID_REQUEST" || got.Error.Message != apiErr.Message {
				t.Errorf("%s %s %s: %d %+v, want 400 INVALID_REQUEST %q", tc.at.method, tc.at.path, tc.body, code, got, apiErr.Message)
			}
		})
	}
}

// mustAnswerError sends body to a gateway without dependencies (whose
// refusals of a body come before any) and reads its error answer.
func mustAnswerError(t *testing.T, method, path, body string) (int, client.ErrorBody) {
	t.Helper()
	s := New(Config{AdminToken: "t"}, Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer t")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	var got client.ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%s %s: %d %q %q, want a JSON error body", method, path, w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	return w.Code, got
}
