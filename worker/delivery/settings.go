package delivery

import (
	"time"

	"orderpipe/pkg/setting"
	"orderpipe/pkg/webhook"
)

var (
	urlsVar        = setting.Var{Name: "WEBHOOK_URLS", Default: "", Help: "comma-separated http(s) endpoints that receive every orders.status event as a Standard Webhook (POST, signed); empty: no webhooks"}
	secretVar      = setting.Var{Name: "WEBHOOK_SECRET", Default: "", Help: "the endpoints' signing secret, whsec_<base64 of 24 to 64 random bytes> (Standard Webhooks); required with WEBHOOK_URLS"}
	timeoutVar     = setting.Var{Name: "WEBHOOK_TIMEOUT", Default: "10s", Help: "an endpoint that has not answered a webhook within this Go duration failed that attempt (retried)"}
	retryForVar    = setting.Var{Name: "WEBHOOK_RETRY_FOR", Default: "24h", Help: "a webhook not delivered is retried with exponential backoff and full jitter for this Go duration (at least 24h), then kept as failed for `orderpipe webhooks replay`"}
	backoffMaxVar  = setting.Var{Name: "WEBHOOK_BACKOFF_MAX", Default: "1h", Help: "the longest backoff between two attempts of one webhook (each drawn at random up to min(this, 1s × 2^attempts))"}
	concurrencyVar = setting.Var{Name: "WEBHOOK_CONCURRENCY", Default: "16", Help: "webhooks in flight per endpoint per deliverer replica (each to a different order)"}
	intervalVar    = setting.Var{Name: "WEBHOOK_INTERVAL", Default: "200ms", Help: "pause between the deliverer's passes over the outbox and over each endpoint's due webhooks once there is nothing to do"}
	retentionVar   = setting.Var{Name: "WEBHOOK_RETENTION", Default: "168h", Help: "delivered webhooks (webhook_deliveries rows) are deleted after this Go duration; pending and failed ones never are"}
)

// Settings are the deliverer's environment variables.
var Settings = []setting.Var{urlsVar, secretVar, timeoutVar, retryForVar, backoffMaxVar, concurrencyVar, intervalVar, retentionVar}

// MinRetryFor is the shortest retry window the contract allows.
const MinRetryFor = 24 * time.Hour

// Read is the deliverer's Config as its settings describe it. With
// WEBHOOK_URLS set, a WEBHOOK_SECRET missing or not a Standard Webhooks
// secret is a bad setting (nothing would verify), as is a URL that is not
// http(s); neither message quotes the secret or a URL's credentials.
func Read(r *setting.Reader) Config {
	c := Config{Timeout: r.Duration(timeoutVar.Name), RetryFor: r.Duration(retryForVar.Name), BackoffMax: r.Duration(backoffMaxVar.Name),
		Concurrency: r.Int(concurrencyVar.Name), Interval: r.Duration(intervalVar.Name), Retention: r.Duration(retentionVar.Name)}
	if c.Concurrency == 0 {
		r.Fail("WEBHOOK_CONCURRENCY: want at least 1")
	}
	if c.RetryFor > 0 && c.RetryFor < MinRetryFor {
		r.Fail("WEBHOOK_RETRY_FOR: want at least %s, got %s", MinRetryFor, c.RetryFor)
	}
	eps, err := webhook.ParseEndpoints(r.List(urlsVar.Name))
	if err != nil {
		r.Fail("WEBHOOK_URLS: %v", err)
	}
	c.Endpoints = eps
	raw := r.String(secretVar.Name)
	switch {
	case len(r.List(urlsVar.Name)) > 0 && raw == "":
		r.Fail("WEBHOOK_SECRET is empty: set it with WEBHOOK_URLS, whsec_ and the base64 of 24 to 64 random bytes (echo whsec_$(openssl rand -base64 32))")
	case raw != "":
		key, err := webhook.ParseSecret(raw)
		if err != nil {
			r.Fail("WEBHOOK_SECRET: %v", err)
		}
		c.Secret = key
	}
	return c
}

// readRetryFor is WEBHOOK_RETRY_FOR as `orderpipe webhooks replay` reads it.
func readRetryFor(r *setting.Reader) time.Duration {
	d := r.Duration(retryForVar.Name)
	if d > 0 && d < MinRetryFor {
		r.Fail("WEBHOOK_RETRY_FOR: want at least %s, got %s", MinRetryFor, d)
	}
	return d
}

// Usage is `orderpipe webhook --help`.
const Usage = `usage: orderpipe webhook

Delivers every orders.status event to each of WEBHOOK_URLS as a Standard
Webhook (standardwebhooks.com): a POST signed with WEBHOOK_SECRET (headers
webhook-id, webhook-timestamp, webhook-signature), body
{"type":"order.<status>","timestamp":...,"data":{the event}}. Fed from the
outbox of orders.status (order_events), independently of the relay: at
least once, each order's events in version order per endpoint; an answer
other than a 2xx, or none within WEBHOOK_TIMEOUT, is retried with
exponential backoff and full jitter for WEBHOOK_RETRY_FOR, then kept as
failed (orderpipe webhooks list|replay). Each endpoint has its own queue
and workers: a slow or dead one holds back no other. Any number of
replicas (FOR UPDATE SKIP LOCKED and a lease per claim). /healthz and
/metrics on METRICS_ADDR. Needs Postgres; WEBHOOK_URLS empty: does nothing.
`
