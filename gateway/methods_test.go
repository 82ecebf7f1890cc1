package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"orderpipe/gateway/client"
	"orderpipe/pkg/telemetry"
)

// documentedMethods is each path of openapi.json with its methods
// (upper case), path parameters filled with their examples.
func documentedMethods(t *testing.T) map[string][]string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	mustDocument(t, &doc)
	fill := strings.NewReplacer("{orderNo}", "1-10086-mx1ir84j7901087d0b53", "{activityId}", "1")
	out := map[string][]string{}
	for path, ops := range doc.Paths {
		for m := range ops {
			out[fill.Replace(path)] = append(out[fill.Replace(path)], strings.ToUpper(m))
		}
	}
	if len(out) < 10 {
		t.Fatalf("openapi.json has only %d paths", len(out))
	}
	return out
}

// TestMethodNotAllowed: a path of the document asked with a method it does
// not serve is answered 405 METHOD_NOT_ALLOWED with an Allow header listing
// exactly the methods it serves (GET with HEAD), before any token is
// checked; a path the gateway does not have is 404 NOT_FOUND. The admin
// paths are 404 for every method where the admin API is not served: with
// ADMIN_TOKEN empty, and on the public listener when ADMIN_ADDR serves it.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	c := mustContract(t)
	paths := documentedMethods(t)
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "QUERY"}
	type answer struct {
		status      int
		allow, code string
	}
	// The contract describes one listener serving both APIs: the order
	// paths on the admin-only listener are outside it.
	ask := func(t *testing.T, base, method, path string, contract bool) answer {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if err := c.Check(req, nil, res, body); contract && err != nil {
			t.Errorf("%s %s: %v", method, path, err)
		}
		var e client.ErrorBody
		_ = json.Unmarshal(body, &e)
		return answer{res.StatusCode, res.Header.Get("Allow"), string(e.Error.Code)}
	}
	serve := func(t *testing.T, h http.Handler) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	newServer := func(cfg Config) *Server {
		return New(cfg, Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	}
	on := newServer(Config{AdminToken: "t"})
	off := newServer(Config{})
	split := newServer(Config{AdminToken: "t", AdminAddr: "127.0.0.1:0"})
	listeners := []struct {
		name      string
		base      string
		adminOn   bool
		publicOff bool // the order API is not served here
	}{
		{"AdminOn", serve(t, on.Handler()), true, false},
		{"AdminOff", serve(t, off.Handler()), false, false},
		{"PublicOfSplit", serve(t, split.Handler()), false, false},
		{"AdminOfSplit", serve(t, split.AdminHandler()), true, true},
	}
	asked := 0
	for _, l := range listeners {
		t.Run(l.name, func(t *testing.T) {
			for path, documented := range paths {
				admin := strings.HasPrefix(path, "/admin/")
				served := admin && l.adminOn || !admin && !l.publicOff
				allow := []string{}
				for _, m := range []string{"GET", "HEAD", "POST", "PUT"} {
					if slices.Contains(documented, m) || m == "HEAD" && slices.Contains(documented, "GET") {
						allow = append(allow, m)
					}
				}
				for _, m := range methods {
					if slices.Contains(allow, m) {
						continue
					}
					got := ask(t, l.base, m, path, admin || !l.publicOff)
					asked++
					want := answer{http.StatusMethodNotAllowed, strings.Join(allow, ", "), "METHOD_NOT_ALLOWED"}
					if !served {
						want = answer{http.StatusNotFound, "", "NOT_FOUND"}
					}
					if m == "HEAD" && want.code != "" {
						want.code = "" // no body
					}
					if got != want {
						t.Errorf("%s %s: %+v, want %+v", m, path, got, want)
					}
				}
			}
			if got := ask(t, l.base, "GET", "/v1/nothing", true); got != (answer{http.StatusNotFound, "", "NOT_FOUND"}) {
				t.Errorf("GET /v1/nothing: %+v, want 404 NOT_FOUND", got)
			}
		})
	}
	if asked < 100 {
		t.Errorf("asked only %d method/path pairs", asked)
	}
}

// TestHeadServedWithGet: HEAD of a GET route is answered as GET is — the
// same status and headers — without a body.
func TestHeadServedWithGet(t *testing.T) {
	t.Parallel()
	s := New(Config{}, Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, path := range []string{"/healthz", "/openapi.json"} {
		get, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		getBody, _ := io.ReadAll(get.Body)
		get.Body.Close()
		head, err := http.Head(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		headBody, _ := io.ReadAll(head.Body)
		head.Body.Close()
		if head.StatusCode != get.StatusCode || len(headBody) != 0 || len(getBody) == 0 ||
			head.Header.Get("Content-Type") != get.Header.Get("Content-Type") || head.ContentLength != int64(len(getBody)) {
			t.Errorf("HEAD %s: %d %q, %d bytes (length %d); GET: %d %q, %d bytes", path, head.StatusCode, head.Header.Get("Content-Type"),
				len(headBody), head.ContentLength, get.StatusCode, get.Header.Get("Content-Type"), len(getBody))
		}
	}
}

// TestUncleanPathNotFound: a path that is not in its clean form (path.Clean
// would change it) is answered as a path the gateway does not have, 404
// NOT_FOUND in the error body, on every listener: never the mux's redirect
// (307, a text body, and a client re-sending a POST's body elsewhere). Clean
// paths still route, with any characters an orderNo may hold.
func TestUncleanPathNotFound(t *testing.T) {
	t.Parallel()
	newServer := func(cfg Config) *Server {
		return New(cfg, Deps{Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	}
	split := newServer(Config{AdminToken: "t", AdminAddr: "127.0.0.1:0"})
	handlers := map[string]http.Handler{"Public": split.Handler(), "Admin": split.AdminHandler(),
		"Shared": newServer(Config{AdminToken: "t"}).Handler()}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	type answer struct {
		status    int
		code, msg string
	}
	ask := func(t *testing.T, base, method, path, body string) answer {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer t")
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var e client.ErrorBody
		if err := json.Unmarshal(raw, &e); err != nil || res.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %q %q (Location %q), want a JSON body", method, path, res.StatusCode,
				res.Header.Get("Content-Type"), raw, res.Header.Get("Location"))
		}
		return answer{res.StatusCode, string(e.Error.Code), e.Error.Message}
	}
	const orderNo = "1-10086-mx1ir84j7901087d0b53"
	unclean := []struct{ method, path string }{
		{"POST", "//v1/orders"}, {"POST", "/v1/./orders"}, {"POST", "/v1/orders/../orders"}, {"POST", "/v1//orders"},
		{"POST", "/v1/orders/"}, {"POST", "/v1/orders/."}, {"GET", "/v1/orders/" + orderNo + "/"},
		{"GET", "/v1/orders/x/../" + orderNo}, {"POST", "/v1/orders/" + orderNo + "//cancel"},
		{"POST", "/v1/orders/" + orderNo + "/./pay"}, {"GET", "/healthz/"}, {"GET", "/./healthz"}, {"GET", "//healthz"},
		{"GET", "/healthz/.."}, {"PUT", "/admin/v1/activities/1/."}, {"PUT", "/admin//v1/activities/1"},
		{"POST", "/v1/orders/%2e%2e/orders"}, {"POST", "/v1/orders/" + orderNo + "%2F%2E%2E/pay"}, {"DELETE", "//v1/orders"},
	}
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			for _, u := range unclean {
				got := ask(t, srv.URL, u.method, u.path, `{"userId":0}`)
				if want := (answer{http.StatusNotFound, "NOT_FOUND", "no such route: " + u.method + " "}); got.status != want.status ||
					got.code != want.code || !strings.HasPrefix(got.msg, want.msg) {
					t.Errorf("%s %s: %+v, want %+v", u.method, u.path, got, want)
				}
			}
			// Clean paths route: the cancel handler reads the body first.
			clean := []struct {
				method, path string
				want         answer
			}{
				{"GET", "/healthz", answer{http.StatusOK, "", ""}},
				{"GET", "/healthz?next=//x/../y", answer{http.StatusOK, "", ""}},
				{"POST", "/v1/orders/" + orderNo + "/cancel", answer{http.StatusBadRequest, "INVALID_REQUEST", "userId must be a positive integer"}},
				{"POST", "/v1/orders/" + orderNo + "-b3/cancel", answer{http.StatusBadRequest, "INVALID_REQUEST", "userId must be a positive integer"}},
				{"POST", "/v1/orders/1-2-a.b..c_d:e~f/cancel", answer{http.StatusBadRequest, "INVALID_REQUEST", "userId must be a positive integer"}},
				{"POST", "/v1/orders/1-2-%41%2e%2e/cancel", answer{http.StatusBadRequest, "INVALID_REQUEST", "userId must be a positive integer"}},
				{"GET", "/v1/nothing", answer{http.StatusNotFound, "NOT_FOUND", "no such route: GET /v1/nothing"}},
				{"GET", "/", answer{http.StatusNotFound, "NOT_FOUND", "no such route: GET /"}},
			}
			for _, cp := range clean {
				if name == "Admin" && cp.want.code != "NOT_FOUND" { // the admin listener has none of them
					p, _ := url.PathUnescape(strings.Split(cp.path, "?")[0])
					cp.want = answer{http.StatusNotFound, "NOT_FOUND", "no such route: " + cp.method + " " + p}
				}
				if got := ask(t, srv.URL, cp.method, cp.path, `{"userId":0}`); got != cp.want {
					t.Errorf("%s %s: %+v, want %+v", cp.method, cp.path, got, cp.want)
				}
			}
		})
	}
}
