package gateway

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/testenv"
)

func mustContract(t *testing.T) *testenv.APIContract {
	t.Helper()
	return must(t, testenv.NewAPIContract, OpenAPI())
}

// must is f(arg), failing the test at once on f's error.
func must[A, T any](tb testing.TB, f func(A) (T, error), arg A) T {
	tb.Helper()
	v, err := f(arg)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// TestOpenAPIServed: GET /openapi.json serves the embedded document, and
// that answer passes its own contract.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	s := New(Config{}, Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/openapi.json", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(res.Body)
	if res.StatusCode != http.StatusOK || !bytes.Equal(buf.Bytes(), openAPI) || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %s, %d bytes", res.StatusCode, res.Header.Get("Content-Type"), buf.Len())
	}
	if err := c.Check(req, nil, res, buf.Bytes()); err != nil {
		t.Error(err)
	}
	// So do the probes of a gateway without dependencies.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(res.Body)
		res.Body.Close()
		if err := c.Check(req, nil, res, b.Bytes()); err != nil {
			t.Errorf("GET %s: %v", path, err)
		}
	}
}

// TestOpenAPIContractRejectsWrongExchanges is the check's own test: an answer
// the contract does not describe, or a refused request that was taken, fails
// it — so the end-to-end tests' check can fail.
func TestOpenAPIContractRejectsWrongExchanges(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	const (
		order    = `{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1}`
		accepted = `{"requestId":"r-1","orderNo":"1-10086-mx1ir84j7901087d0b53","status":"PENDING","remaining":9}`
	)
	type exchange struct {
		method, path, reqBody string
		reqHeader             map[string]string
		status                int
		resHeader             map[string]string
		resBody               string
	}
	jsonCT := map[string]string{"Content-Type": "application/json"}
	admin := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer t"}
	good := []struct {
		name string
		ex   exchange
	}{
		{"Accepted", exchange{"POST", "/v1/orders", order, jsonCT, 202, nil, accepted}},
		{"Replayed", exchange{"POST", "/v1/orders", order, jsonCT, 200, nil,
			`{"requestId":"r-1","orderNo":"1-10086-mx1ir84j7901087d0b53","status":"PENDING","remaining":9,"replayed":true}`}},
		{"SoldOut", exchange{"POST", "/v1/orders", order, jsonCT, 409, nil, `{"error":{"code":"SOLD_OUT","message":"not enough stock"}}`}},
		{"RateLimited", exchange{"POST", "/v1/orders", order, jsonCT, 429, map[string]string{"Retry-After": "2"},
			`{"error":{"code":"RATE_LIMITED","message":"slow down"}}`}},
		{"UnknownFieldRefused", exchange{"POST", "/v1/orders", `{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1,"price":1}`,
			jsonCT, 400, nil, `{"error":{"code":"INVALID_REQUEST","message":"unknown field \"price\""}}`}},
		{"Rejected", exchange{"GET", "/v1/orders/1-10086-mx1ir84j7901087d0b53", "", nil, 200, nil,
			`{"orderNo":"1-10086-mx1ir84j7901087d0b53","requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1,"status":"REJECTED","reason":"DB_STOCK_MISMATCH","createdAt":"2026-11-29T10:00:00.123456Z"}`}},
		{"PayPending", exchange{"POST", "/v1/orders/1-10086-mx1ir84j7901087d0b53/pay", "", nil, 409, map[string]string{"Retry-After": "1"},
			`{"error":{"code":"ORDER_PENDING","message":"retry"}}`}},
		{"AdminNoToken", exchange{"PUT", "/admin/v1/activities/1", `{"name":"x","startsAt":"2026-11-29T10:00:00Z","endsAt":"2026-11-29T11:00:00Z","items":[{"itemId":1,"stock":5}]}`,
			jsonCT, 401, map[string]string{"WWW-Authenticate": `Bearer realm="orderpipe"`}, `{"error":{"code":"UNAUTHORIZED","message":"admin API needs a token"}}`}},
		{"UnknownRoute", exchange{"DELETE", "/v1/things", "", nil, 404, nil, `{"error":{"code":"NOT_FOUND","message":"no such route: DELETE /v1/things"}}`}},
		{"MethodNotAllowed", exchange{"DELETE", "/v1/orders", "", nil, 405, map[string]string{"Allow": "POST"},
			`{"error":{"code":"METHOD_NOT_ALLOWED","message":"/v1/orders is served with POST, not DELETE"}}`}},
		{"MethodNotAllowedGET", exchange{"POST", "/healthz", "", nil, 405, map[string]string{"Allow": "GET, HEAD"},
			`{"error":{"code":"METHOD_NOT_ALLOWED","message":"/healthz is served with GET, HEAD, not POST"}}`}},
		{"AdminMethodWithAdminOff", exchange{"DELETE", "/admin/v1/activities/1", "", nil, 404, nil,
			`{"error":{"code":"NOT_FOUND","message":"no such route: DELETE /admin/v1/activities/1"}}`}},
		{"IntegralFloatTaken", exchange{"POST", "/v1/orders", `{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":2.4e1}`,
			jsonCT, 202, nil, accepted}},
	}
	bad := []struct {
		name string
		ex   exchange
	}{
		{"UndocumentedStatus", exchange{"POST", "/v1/orders", order, jsonCT, 418, nil, `{"error":{"code":"INTERNAL","message":"teapot"}}`}},
		{"AcceptedWithoutOrderNo", exchange{"POST", "/v1/orders", order, jsonCT, 202, nil, `{"requestId":"r-1","status":"PENDING","remaining":9}`}},
		{"AcceptedWrongStatus", exchange{"POST", "/v1/orders", order, jsonCT, 202, nil,
			`{"requestId":"r-1","orderNo":"1-10086-mx1ir84j7901087d0b53","status":"UNPAID","remaining":9}`}},
		{"AcceptedExtraField", exchange{"POST", "/v1/orders", order, jsonCT, 202, nil,
			`{"requestId":"r-1","orderNo":"1-10086-mx1ir84j7901087d0b53","status":"PENDING","remaining":9,"price":3}`}},
		{"AcceptedSaysReplayed", exchange{"POST", "/v1/orders", order, jsonCT, 202, nil,
			`{"requestId":"r-1","orderNo":"1-10086-mx1ir84j7901087d0b53","status":"PENDING","remaining":9,"replayed":true}`}},
		{"WrongErrorCodeForStatus", exchange{"POST", "/v1/orders", order, jsonCT, 409, nil, `{"error":{"code":"NOT_ON_SALE","message":"x"}}`}},
		{"UnknownErrorCode", exchange{"POST", "/v1/orders", order, jsonCT, 409, nil, `{"error":{"code":"NOPE","message":"x"}}`}},
		{"ErrorWithoutMessage", exchange{"POST", "/v1/orders", order, jsonCT, 409, nil, `{"error":{"code":"SOLD_OUT"}}`}},
		{"UnavailableWithoutRetryAfter", exchange{"POST", "/v1/orders", order, jsonCT, 503, nil, `{"error":{"code":"UNAVAILABLE","message":"down"}}`}},
		{"RateLimitedRetryAfterNotSeconds", exchange{"POST", "/v1/orders", order, jsonCT, 429, map[string]string{"Retry-After": "soon"},
			`{"error":{"code":"RATE_LIMITED","message":"slow down"}}`}},
		{"NotJSON", exchange{"POST", "/v1/orders", order, jsonCT, 202, map[string]string{"Content-Type": "text/plain"}, accepted}},
		{"RefusedRequestTaken", exchange{"POST", "/v1/orders", `{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":101}`,
			jsonCT, 202, nil, accepted}},
		{"BadRequestIDTaken", exchange{"POST", "/v1/orders", `{"requestId":"r 1","userId":42,"activityId":1,"itemId":10086,"quantity":1}`,
			jsonCT, 202, nil, accepted}},
		{"RejectedWithoutReason", exchange{"GET", "/v1/orders/1-10086-mx1ir84j7901087d0b53", "", nil, 200, nil,
			`{"orderNo":"1-10086-mx1ir84j7901087d0b53","requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1,"status":"REJECTED","createdAt":"2026-11-29T10:00:00Z"}`}},
		{"PaidWithoutPaidAt", exchange{"GET", "/v1/orders/1-10086-mx1ir84j7901087d0b53", "", nil, 200, nil,
			`{"orderNo":"1-10086-mx1ir84j7901087d0b53","requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1,"status":"PAID","createdAt":"2026-11-29T10:00:00Z"}`}},
		{"BadTime", exchange{"GET", "/v1/orders/1-10086-mx1ir84j7901087d0b53", "", nil, 200, nil,
			`{"orderNo":"1-10086-mx1ir84j7901087d0b53","requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":1,"status":"UNPAID","createdAt":"yesterday"}`}},
		{"AdminWithoutTokenTaken", exchange{"PUT", "/admin/v1/activities/1", `{"name":"x","startsAt":"2026-11-29T10:00:00Z","endsAt":"2026-11-29T11:00:00Z","items":[{"itemId":1,"stock":5}]}`,
			jsonCT, 200, nil, `{"activityId":1,"name":"x","startsAt":"2026-11-29T10:00:00Z","endsAt":"2026-11-29T11:00:00Z","perUserLimit":1,"items":[{"itemId":1,"initialStock":5,"stock":5}]}`}},
		{"PreheatWithoutLoaded", exchange{"POST", "/admin/v1/activities/1/preheat", "", admin, 200, nil,
			`{"activityId":1,"name":"x","startsAt":"2026-11-29T10:00:00Z","endsAt":"2026-11-29T11:00:00Z","perUserLimit":1,"items":[{"itemId":1,"initialStock":5,"stock":5}]}`}},
		{"ReadyWithFailedCheck", exchange{"GET", "/readyz", "", nil, 200, nil, `{"status":"ok","checks":{"redis":"unavailable"}}`}},
		{"UnknownRouteAnswered", exchange{"DELETE", "/v1/things", "", nil, 200, nil, `{}`}},
		{"WrongMethodAnswered", exchange{"DELETE", "/v1/orders", "", nil, 200, nil, `{}`}},
		{"WrongMethodNotFound", exchange{"DELETE", "/v1/orders", "", nil, 404, nil, `{"error":{"code":"NOT_FOUND","message":"no such route"}}`}},
		{"MethodNotAllowedWithoutAllow", exchange{"DELETE", "/v1/orders", "", nil, 405, nil,
			`{"error":{"code":"METHOD_NOT_ALLOWED","message":"no"}}`}},
		{"MethodNotAllowedWrongAllow", exchange{"DELETE", "/admin/v1/activities/1", "", nil, 405, map[string]string{"Allow": "GET, PUT"},
			`{"error":{"code":"METHOD_NOT_ALLOWED","message":"no"}}`}},
		{"NullQuantityTaken", exchange{"POST", "/v1/orders", `{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":null}`,
			jsonCT, 202, nil, accepted}},
		{"FractionTaken", exchange{"POST", "/v1/orders", `{"requestId":"r-1","userId":42,"activityId":1,"itemId":10086,"quantity":24.5}`,
			jsonCT, 202, nil, accepted}},
	}
	run := func(ex exchange) error {
		var body *bytes.Reader
		if ex.reqBody != "" {
			body = bytes.NewReader([]byte(ex.reqBody))
		} else {
			body = bytes.NewReader(nil)
		}
		req := httptest.NewRequest(ex.method, "http://localhost:8080"+ex.path, body)
		for k, v := range ex.reqHeader {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", "application/json")
		for k, v := range ex.resHeader {
			rec.Header().Set(k, v)
		}
		rec.WriteHeader(ex.status)
		rec.WriteString(ex.resBody)
		return c.Check(req, []byte(ex.reqBody), rec.Result(), []byte(ex.resBody))
	}
	for _, tc := range good {
		t.Run("Good"+tc.name, func(t *testing.T) {
			if err := run(tc.ex); err != nil {
				t.Errorf("a correct exchange failed the check: %v", err)
			}
		})
	}
	for _, tc := range bad {
		t.Run("Bad"+tc.name, func(t *testing.T) {
			if err := run(tc.ex); err == nil {
				t.Errorf("a wrong exchange passed the check: %+v", tc.ex)
			} else {
				t.Logf("caught: %v", err)
			}
		})
	}
}

// mustDocument decodes the embedded document into doc.
func mustDocument(t *testing.T, doc any) {
	t.Helper()
	if err := json.Unmarshal(openAPI, doc); err != nil {
		t.Fatal(err)
	}
}

// mustErrorCodes is the document's ErrorCode catalogue.
func mustErrorCodes(t *testing.T) []string {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas struct {
				ErrorCode struct {
					Enum []string `json:"enum"`
				} `json:"ErrorCode"`
			} `json:"schemas"`
		} `json:"components"`
	}
	mustDocument(t, &doc)
	return doc.Components.Schemas.ErrorCode.Enum
}

// TestOpenAPIListsEveryErrorCode: every error code the gateway's code can
// answer is in the document's ErrorCode catalogue, and the catalogue has no
// code the gateway never answers.
func TestOpenAPIListsEveryErrorCode(t *testing.T) {
	t.Parallel()
	documented := mustErrorCodes(t)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	// writeError(w, status, "CODE", ...), and apiError{..., Code: "CODE"} or conflict{..., Code: "CODE"}.
	re := regexp.MustCompile(`(?:writeError\(w, [^,]+, |Code: +)"([A-Z_]+)"`)
	used := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			used[string(m[1])] = true
		}
	}
	used["INVALID_REQUEST"] = true // invalid() builds it
	for code := range used {
		if !slices.Contains(documented, code) {
			t.Errorf("the gateway answers error code %s, which openapi.json does not list", code)
		}
	}
	for _, code := range documented {
		if !used[code] && !strings.Contains(string(must(t, os.ReadFile, "http.go")), code) {
			t.Errorf("openapi.json lists error code %s, which the gateway never answers", code)
		}
	}
	if len(used) < 15 {
		t.Errorf("found only %d error codes in the source: the pattern no longer matches the code", len(used))
	}
}

// TestOpenAPIExamplesMatchTheirSchemas: every example in the document is an
// exchange the contract accepts — the request example with each documented
// answer's examples (headers from their examples) — so the examples an
// integrator copies are right.
func TestOpenAPIExamplesMatchTheirSchemas(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	type example struct {
		Value any `json:"value"`
	}
	type media struct {
		Examples map[string]example `json:"examples"`
	}
	type param struct {
		Ref     string `json:"$ref"`
		Name    string `json:"name"`
		Example any    `json:"example"`
	}
	type header struct {
		Ref     string `json:"$ref"`
		Example any    `json:"example"`
	}
	type response struct {
		Ref     string            `json:"$ref"`
		Headers map[string]header `json:"headers"`
		Content map[string]media  `json:"content"`
	}
	type operation struct {
		Security    []map[string]any `json:"security"`
		Parameters  []param          `json:"parameters"`
		RequestBody *struct {
			Content map[string]media `json:"content"`
		} `json:"requestBody"`
		Responses map[string]response `json:"responses"`
	}
	var doc struct {
		Paths      map[string]map[string]operation `json:"paths"`
		Components struct {
			Parameters map[string]param    `json:"parameters"`
			Headers    map[string]header   `json:"headers"`
			Responses  map[string]response `json:"responses"`
		} `json:"components"`
	}
	mustDocument(t, &doc)
	ref := func(r string) string { return r[strings.LastIndexByte(r, '/')+1:] }
	checked := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			method = strings.ToUpper(method)
			url := path
			for _, p := range op.Parameters {
				if p.Ref != "" {
					p = doc.Components.Parameters[ref(p.Ref)]
				}
				url = strings.ReplaceAll(url, "{"+p.Name+"}", strings.Trim(string(must(t, json.Marshal, p.Example)), `"`))
			}
			var reqBody []byte
			if op.RequestBody != nil {
				for _, ex := range op.RequestBody.Content["application/json"].Examples {
					reqBody = must(t, json.Marshal, ex.Value)
				}
				if reqBody == nil {
					t.Errorf("%s %s: the request body has no example", method, path)
				}
			}
			for status, res := range op.Responses {
				if res.Ref != "" {
					res = doc.Components.Responses[ref(res.Ref)]
				}
				for ct, m := range res.Content {
					if len(m.Examples) == 0 && path != "/openapi.json" {
						t.Errorf("%s %s %s: no example", method, path, status)
					}
					for name, ex := range m.Examples {
						t.Run(method+path+"/"+status+"/"+name, func(t *testing.T) {
							req := httptest.NewRequest(method, "http://localhost:8080"+url, bytes.NewReader(reqBody))
							if reqBody != nil {
								req.Header.Set("Content-Type", "application/json")
							}
							if len(op.Security) > 0 {
								req.Header.Set("Authorization", "Bearer example-token")
							}
							rec := httptest.NewRecorder()
							rec.Header().Set("Content-Type", ct)
							for name, h := range res.Headers {
								if h.Ref != "" {
									h = doc.Components.Headers[ref(h.Ref)]
								}
								rec.Header().Set(name, strings.Trim(string(must(t, json.Marshal, h.Example)), `"`))
							}
							var body []byte
							if s, ok := ex.Value.(string); ok && ct != "application/json" {
								body = []byte(s)
							} else {
								body = must(t, json.Marshal, ex.Value)
							}
							rec.WriteHeader(must(t, strconv.Atoi, status))
							rec.Write(body)
							if err := c.Check(req, reqBody, rec.Result(), body); err != nil {
								t.Error(err)
							}
						})
						checked++
					}
				}
			}
		}
	}
	if checked < 30 {
		t.Errorf("checked only %d examples", checked)
	}
}

// TestOpenAPIRefusalsStated: each rule an operation lists in x-refusals (the
// refusals of a schema-valid request, which `make fuzz-api` holds the
// gateway to) is one the gateway answers: its code in the catalogue, its
// status among the operation's answers, its rule the start of a message the
// code says; and the operation's description states it.
func TestOpenAPIRefusalsStated(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]map[string]struct {
			Description string `json:"description"`
			Refusals    []struct {
				Status int    `json:"status"`
				Code   string `json:"code"`
				Rule   string `json:"rule"`
			} `json:"x-refusals"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	mustDocument(t, &doc)
	codes := mustErrorCodes(t)
	var src strings.Builder
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			src.Write(must(t, os.ReadFile, f))
		}
	}
	rules := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			for _, r := range op.Refusals {
				name := strings.ToUpper(method) + " " + path
				if !slices.Contains(codes, r.Code) {
					t.Errorf("%s: x-refusals has %s, not in the ErrorCode catalogue", name, r.Code)
				}
				if _, ok := op.Responses[strconv.Itoa(r.Status)]; !ok {
					t.Errorf("%s: x-refusals has %d %s, not among its answers", name, r.Status, r.Code)
				}
				if !strings.Contains(op.Description, r.Code) {
					t.Errorf("%s: the description does not state the refusal %d %s", name, r.Status, r.Code)
				}
				if r.Rule != "" {
					rules++
					if !strings.Contains(src.String(), `"`+r.Rule) {
						t.Errorf("%s: x-refusals rule %q is no message the gateway says", name, r.Rule)
					}
				}
			}
		}
	}
	if rules < 5 {
		t.Errorf("only %d rules in x-refusals", rules)
	}
}
