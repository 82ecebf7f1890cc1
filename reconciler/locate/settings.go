package locate

import "orderpipe/pkg/setting"

// Settings are locate's own environment variables (it also reads the
// database's, Redis's and the stock store's).
var Settings = []setting.Var{
	{Name: "TRACE_QUERY_URL", Default: "", Help: "Jaeger query service (e.g. http://jaeger:16686) `orderpipe locate` reads a request's span tree from (GET /api/traces/{id}); takes precedence over TRACE_STORE_DIR; empty ⇒ not read"},
}
