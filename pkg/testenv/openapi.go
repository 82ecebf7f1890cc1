package testenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/paths"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// APIContract checks HTTP exchanges against an OpenAPI 3.1 description
// (github.com/pb33f/libopenapi-validator). The rules:
//
//   - Every answer must be one the description documents for its operation:
//     a listed status, its media type, a body matching its schema (error
//     codes included), its required headers (Retry-After).
//   - A request the description refuses (an unknown field, a value out of
//     range, no bearer token where one is required, ...) must be refused: a
//     4xx. Tests send such requests on purpose; the gateway must not take
//     what the contract says it refuses.
//   - A path the description does not have must be answered 404
//     NOT_FOUND with the error body; a path it has, with a method it does
//     not, 405 METHOD_NOT_ALLOWED with an Allow header listing exactly the
//     path's methods (GET with HEAD), or 404 NOT_FOUND where every
//     operation of the path is an admin one (the admin API may be off).
//     HEAD where GET is described is answered as GET, without a body.
//
// It is safe for concurrent use.
type APIContract struct {
	model *v3.Document
	v     validator.Validator
	opts  *config.ValidationOptions
}

// NewAPIContract parses spec, which must itself be a valid OpenAPI document.
func NewAPIContract(spec []byte) (*APIContract, error) {
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, fmt.Errorf("parsing the OpenAPI document: %w", err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("building the OpenAPI model: %w", err)
	}
	opts := []config.Option{config.WithFormatAssertions()}
	v, errs := validator.NewValidator(doc, opts...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("building the validator: %w", errors.Join(errs...))
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", joinValidation(verrs))
	}
	return &APIContract{model: &model.Model, v: v, opts: config.NewValidationOptions(opts...)}, nil
}

// Check returns what is wrong with one exchange, or nil. req and res are
// only read; their bodies are given separately (already consumed).
func (c *APIContract) Check(req *http.Request, reqBody []byte, res *http.Response, resBody []byte) error {
	// Fresh copies: the validator reads bodies, and req may be in use.
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	r.ContentLength = int64(len(reqBody))
	resCopy := *res
	resCopy.Body = io.NopCloser(bytes.NewReader(resBody))
	resCopy.Request = r

	item, _, _ := paths.FindPath(r, c.model, c.opts)
	if item == nil {
		if r.Method == http.MethodHead {
			return checkStatus(res.StatusCode, resBody, http.StatusNotFound)
		}
		return checkNotFound(res.StatusCode, resBody)
	}
	if helpers.ExtractOperation(r, item) == nil {
		return checkMethodNotAllowed(r.Method, item, res, resBody)
	}
	var problems []error
	if ok, errs := c.v.ValidateHttpRequestSync(r); !ok {
		// A schema that does not compile is the document's fault, never
		// a refusal of the request.
		for _, e := range errs {
			if strings.Contains(e.Message, "failed schema compilation") {
				problems = append(problems, fmt.Errorf("the contract itself is broken: %w", joinValidation([]*verrors.ValidationError{e})))
			}
		}
		if res.StatusCode < 400 || res.StatusCode > 499 {
			problems = append(problems, fmt.Errorf("the contract refuses this request, but it was answered %d: %w",
				res.StatusCode, joinValidation(errs)))
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	if ok, errs := c.v.ValidateHttpResponse(r, &resCopy); !ok {
		problems = append(problems, fmt.Errorf("the answer %d %s breaks the contract: %w", res.StatusCode,
			truncate(resBody, 300), joinValidation(errs)))
	}
	return errors.Join(problems...)
}

// checkMethodNotAllowed is the answer to a path the contract has, with a
// method it has not.
func checkMethodNotAllowed(method string, item *v3.PathItem, res *http.Response, body []byte) error {
	ops := item.GetOperations()
	if method == http.MethodHead && item.Get != nil {
		if _, ok := item.Get.Responses.Codes.Get(strconv.Itoa(res.StatusCode)); !ok || len(body) > 0 {
			return fmt.Errorf("HEAD of a GET path was answered %d with %d bytes, want a status GET documents and no body", res.StatusCode, len(body))
		}
		return nil
	}
	admin := ops.Len() > 0
	var allow []string
	for _, m := range []string{"get", "head", "post", "put", "patch", "delete", "options", "trace"} {
		op, ok := ops.Get(m)
		if !ok && !(m == "head" && item.Get != nil) {
			continue
		}
		allow = append(allow, strings.ToUpper(m))
		if ok && !slices.Contains(op.Tags, "admin") {
			admin = false
		}
	}
	if admin && res.StatusCode == http.StatusNotFound {
		if method == http.MethodHead {
			return checkStatus(res.StatusCode, body, http.StatusNotFound)
		}
		return checkNotFound(res.StatusCode, body)
	}
	code, msg := errorOf(body)
	if method == http.MethodHead && len(body) == 0 { // the answer without its body
		code, msg = "METHOD_NOT_ALLOWED", "-"
	}
	want := strings.Join(allow, ", ")
	if res.StatusCode != http.StatusMethodNotAllowed || code != "METHOD_NOT_ALLOWED" || msg == "" || res.Header.Get("Allow") != want ||
		res.Header.Get("Content-Type") != "application/json" {
		return fmt.Errorf("%s on a path the contract has with %s was answered %d (Allow %q) %s, want 405 METHOD_NOT_ALLOWED with Allow %q",
			method, want, res.StatusCode, res.Header.Get("Allow"), truncate(body, 300), want)
	}
	return nil
}

// checkStatus is an answer to HEAD: the status wanted, no body.
func checkStatus(status int, body []byte, want int) error {
	if status != want || len(body) > 0 {
		return fmt.Errorf("HEAD was answered %d with %d bytes, want %d without a body", status, len(body), want)
	}
	return nil
}

func errorOf(body []byte) (code, message string) {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return "", ""
	}
	return e.Error.Code, e.Error.Message
}

// checkNotFound is the answer to a route the contract does not have.
func checkNotFound(status int, body []byte) error {
	if code, msg := errorOf(body); status != http.StatusNotFound || code != "NOT_FOUND" || msg == "" {
		return fmt.Errorf("a route the contract does not have was answered %d %s, want 404 NOT_FOUND", status, truncate(body, 300))
	}
	return nil
}

func joinValidation(errs []*verrors.ValidationError) error {
	var b strings.Builder
	for i, e := range errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Message)
		if e.Reason != "" {
			b.WriteString(": " + e.Reason)
		}
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, " [%s at %s]", s.Reason, s.KeywordLocation)
		}
	}
	return errors.New(b.String())
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
