// Package webhook is the Standard Webhooks format (standardwebhooks.com) as
// orderpipe speaks it: the whsec_ secret, the v1 HMAC-SHA256 signature, the
// webhook-id of an order's status version (stable across retries and
// replays), and the endpoint list with its credentials kept out of logs.
// The deliverer (worker/delivery) sends with it and the tests verify with
// it; it never sends, stores or logs anything itself.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Secret is the endpoints' signing key, the decoded bytes of a
// `whsec_<base64>` WEBHOOK_SECRET.
type Secret []byte

// secretPrefix starts every Standard Webhooks secret.
const secretPrefix = "whsec_"

// ParseSecret decodes a WEBHOOK_SECRET. The Standard Webhooks
// specification asks for 24 to 64 random bytes; the error never quotes the
// value.
func ParseSecret(s string) (Secret, error) {
	b64, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, errors.New("want whsec_ followed by the base64 of the key")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("the part after whsec_ is not standard base64")
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("the key is %d bytes, want 24 to 64 (openssl rand -base64 32)", len(key))
	}
	return key, nil
}

// Sign is the webhook-signature header of a message: "v1," and the base64
// of HMAC-SHA256 over id.timestamp.body with the key.
func (s Secret) Sign(id string, at time.Time, body []byte) string {
	mac := hmac.New(sha256.New, s)
	mac.Write([]byte(id))
	mac.Write([]byte("."))
	mac.Write([]byte(strconv.FormatInt(at.Unix(), 10)))
	mac.Write([]byte("."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// MessageID is the webhook-id of an order's version: the same for every
// attempt and replay of that event, to every endpoint.
func MessageID(orderNo string, version int) string {
	return orderNo + "." + strconv.Itoa(version)
}

// ParseMessageID is MessageID's inverse.
func ParseMessageID(id string) (orderNo string, version int, err error) {
	i := strings.LastIndexByte(id, '.')
	if i > 0 {
		if v, verr := strconv.Atoi(id[i+1:]); verr == nil && v >= 1 {
			return id[:i], v, nil
		}
	}
	return "", 0, fmt.Errorf("%q is not a webhook id (<orderNo>.<version>)", id)
}

// Endpoint is one of WEBHOOK_URLS.
type Endpoint struct {
	// URL is as configured: it may carry credentials, so it is only ever
	// dialled, never shown.
	URL string
	// Name is scheme://host/path, without credentials, query or fragment:
	// how logs, metrics, Postgres and `orderpipe webhooks` name it.
	Name string
}

// ParseEndpoints reads WEBHOOK_URLS: absolute http or https URLs, each
// naming a different endpoint. An error shows a URL with its password
// masked, never its query.
func ParseEndpoints(raws []string) ([]Endpoint, error) {
	var out []Endpoint
	seen := map[string]bool{}
	for _, raw := range raws {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" || u.Opaque != "" {
			return nil, fmt.Errorf("want absolute http(s) URLs without a fragment, got %q", redactURL(raw))
		}
		name := u.Scheme + "://" + u.Host + u.EscapedPath()
		if seen[name] {
			return nil, fmt.Errorf("%s is listed twice", name)
		}
		seen[name] = true
		out = append(out, Endpoint{URL: raw, Name: name})
	}
	return out, nil
}

// redactURL is raw with its userinfo and query masked; in what does not
// parse, all before an @ and after a ?.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if u.User != nil {
			u.User = url.User("xxxxx")
		}
		if u.RawQuery != "" {
			u.RawQuery = "xxxxx"
		}
		return u.String()
	}
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i] + "?xxxxx"
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		if scheme, _, ok := strings.Cut(raw[:i], "://"); ok {
			return scheme + "://xxxxx" + raw[i:]
		}
		return "xxxxx" + raw[i:]
	}
	return raw
}

// Secrets are the parts of the endpoint's URL that may be credentials (the
// userinfo password, the query's values), for package secret.
func (e Endpoint) Secrets() []string {
	u, err := url.Parse(e.URL)
	if err != nil {
		return nil
	}
	var out []string
	if p, ok := u.User.Password(); ok {
		out = append(out, p)
	}
	for _, vs := range u.Query() {
		out = append(out, vs...)
	}
	return out
}
