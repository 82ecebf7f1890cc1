package gateway

import (
	"bytes"
	_ "embed"
	"net/http"
	"strconv"
)

// openAPI is the OpenAPI 3.1 description of this API: the contract the
// storefront integrates against. The end-to-end tests check every request
// they send and every answer they get against it, so a handler that drifts
// from it fails them.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 description of the gateway's HTTP API,
// the document GET /openapi.json serves.
func OpenAPI() []byte { return bytes.Clone(openAPI) }

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Content-Length"] = []string{strconv.Itoa(len(openAPI))}
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPI)
}
