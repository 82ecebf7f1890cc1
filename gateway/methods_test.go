package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"orderpipe/pkg/telemetry"
)

// documentedMethods is each path of openapi.json with its methods
// (upper case), path parameters filled with their examples.
func documentedMethods(t *testing.T) map[string][]string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
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
		var e errorBody
		_ = json.Unmarshal(body, &e)
		return answer{res.StatusCode, res.Header.Get("Allow"), e.Error.Code}
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
