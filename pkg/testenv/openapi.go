package testenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
//   - A route or method the description does not have must be answered
//     404 NOT_FOUND with the error body.
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

	if !c.documented(r) {
		return checkNotFound(res.StatusCode, resBody)
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

// documented says whether the description has r's path and method.
func (c *APIContract) documented(r *http.Request) bool {
	item, _, _ := paths.FindPath(r, c.model, c.opts)
	return item != nil && helpers.ExtractOperation(r, item) != nil
}

// checkNotFound is the answer to a route the contract does not have.
func checkNotFound(status int, body []byte) error {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if status != http.StatusNotFound || json.Unmarshal(body, &e) != nil || e.Error.Code != "NOT_FOUND" || e.Error.Message == "" {
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
