// Package delivery is `orderpipe webhook` (and `orderpipe webhooks`, its
// dead-letter tool): it delivers the outbox of orders.status over HTTP, every
// order_events row, to each endpoint of WEBHOOK_URLS, as a Standard Webhook
// (standardwebhooks.com) signed with WEBHOOK_SECRET (pkg/webhook holds the
// format: the secret, the signature, the message id). It reads the outbox
// independently of the relay (worker/relay), through its own column and table
// (order.Store.QueueWebhooks), so neither ever waits for the other; each
// endpoint has its own loop and its own rows (webhook_deliveries), so a
// slow or dead endpoint holds back no other. Delivery is at least once and,
// per endpoint, in version order per order: a version is claimed only once
// the versions before it were delivered or gave up (order.Store
// .ClaimWebhooks). Any number of replicas may run: a claim is a lease
// (FOR UPDATE SKIP LOCKED, then next_attempt_at moved to the lease's end),
// so each event goes to each endpoint once, a retry's duplicate aside.
// It never decides an order's state and never writes one: it only carries
// what Postgres committed, and never logs the secret or a URL's
// credentials.
package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"orderpipe/pkg/clock"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/version"
	"orderpipe/pkg/webhook"
)

// Config is the deliverer's configuration.
type Config struct {
	// Endpoints receive every event (WEBHOOK_URLS); none: Run does nothing.
	Endpoints []webhook.Endpoint
	// Secret signs every message (WEBHOOK_SECRET).
	Secret webhook.Secret
	// Timeout bounds one attempt, connection to answer (WEBHOOK_TIMEOUT).
	Timeout time.Duration
	// RetryFor is how long an event not delivered is retried, from when it
	// was queued (or replayed) (WEBHOOK_RETRY_FOR).
	RetryFor time.Duration
	// BackoffBase and BackoffMax shape the wait before a retry: drawn at
	// random in [0, min(BackoffMax, BackoffBase × 2^(attempts-1))]
	// ("full jitter"; WEBHOOK_BACKOFF_MAX).
	BackoffBase, BackoffMax time.Duration
	// Concurrency is how many webhooks one replica has in flight per
	// endpoint, and how many it claims at once (WEBHOOK_CONCURRENCY).
	Concurrency int
	// Interval is the pause between passes with nothing to do
	// (WEBHOOK_INTERVAL).
	Interval time.Duration
	// QueueBatch caps the events queued per statement.
	QueueBatch int
	// Retention is how long delivered rows are kept (WEBHOOK_RETENTION).
	Retention time.Duration
	// Lease is how long a claim holds its rows before another replica may
	// take them over (default Timeout + 15s). An attempt starts only while
	// at least Timeout of its lease is left, so it ends, answered or not,
	// before another replica can send the row again: a paused or killed
	// deliverer causes at most a duplicate, never an older version after a
	// newer one.
	Lease time.Duration
	// GaugeInterval is the pause between two counts of the backlog gauges;
	// PruneInterval between two prunes.
	GaugeInterval, PruneInterval time.Duration
}

func (c *Config) defaults() {
	setting.DefaultTo(&c.Timeout, timeoutVar.Duration())
	setting.DefaultTo(&c.RetryFor, retryForVar.Duration())
	setting.DefaultTo(&c.BackoffBase, time.Second)
	setting.DefaultTo(&c.BackoffMax, backoffMaxVar.Duration())
	setting.DefaultTo(&c.Concurrency, concurrencyVar.Int())
	setting.DefaultTo(&c.Interval, intervalVar.Duration())
	setting.DefaultTo(&c.QueueBatch, 1000)
	setting.DefaultTo(&c.Retention, retentionVar.Duration())
	if c.Lease <= c.Timeout {
		c.Lease = c.Timeout + 15*time.Second
	}
	setting.DefaultTo(&c.GaugeInterval, 5*time.Second)
	setting.DefaultTo(&c.PruneInterval, time.Minute)
}

// Deps are the deliverer's collaborators.
type Deps struct {
	Orders  *order.Store
	Metrics *telemetry.Metrics // nil ⇒ a private registry
	Log     *slog.Logger
	// Transport sends the requests (nil: a transport of its own per
	// endpoint).
	Transport http.RoundTripper
}

// Deliverer is one deliverer replica.
type Deliverer struct {
	cfg     Config
	deps    Deps
	names   []string
	clients map[string]*http.Client
}

// finishTimeout bounds the recording of a batch's outcomes, and a claim.
const finishTimeout = 10 * time.Second

// New builds a deliverer.
func New(cfg Config, deps Deps) *Deliverer {
	cfg.defaults()
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Metrics == nil {
		deps.Metrics = telemetry.NewMetrics()
	}
	d := &Deliverer{cfg: cfg, deps: deps, clients: map[string]*http.Client{}}
	for _, ep := range cfg.Endpoints {
		d.names = append(d.names, ep.Name)
		tr := deps.Transport
		if tr == nil {
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.MaxIdleConnsPerHost = cfg.Concurrency
			tr = t
		}
		d.clients[ep.Name] = &http.Client{Transport: tr, Timeout: cfg.Timeout,
			// A redirect is not a delivery: the endpoint is what is configured.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for _, o := range []string{"delivered", "retried", "failed"} {
			deps.Metrics.WebhookDeliveries.WithLabelValues(ep.Name, o)
		}
		deps.Metrics.WebhookPending.WithLabelValues(ep.Name)
		deps.Metrics.WebhookOldest.WithLabelValues(ep.Name)
		deps.Metrics.WebhookFailed.WithLabelValues(ep.Name)
	}
	return d
}

// Run delivers until ctx ends: one loop queues the outbox for every
// endpoint, one loop per endpoint delivers its due webhooks, one counts
// the backlog and prunes. Attempts in flight are finished and recorded
// before it returns.
func (d *Deliverer) Run(ctx context.Context) error {
	if len(d.cfg.Endpoints) == 0 {
		return nil
	}
	d.deps.Log.Info("webhook deliverer started", "endpoints", d.names, "timeout", d.cfg.Timeout.String(),
		"retry_for", d.cfg.RetryFor.String(), "concurrency", d.cfg.Concurrency)
	var wg sync.WaitGroup
	wg.Go(func() { d.queueLoop(ctx) })
	for _, ep := range d.cfg.Endpoints {
		wg.Go(func() { d.endpointLoop(ctx, ep) })
	}
	wg.Go(func() { d.housekeeping(ctx) })
	wg.Wait()
	return nil
}

// queueLoop copies the outbox into the deliveries of every endpoint.
func (d *Deliverer) queueLoop(ctx context.Context) {
	wait := d.cfg.Interval
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, finishTimeout)
		read, marked, err := d.deps.Orders.QueueWebhooks(qctx, d.names, d.cfg.QueueBatch, d.cfg.RetryFor)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			d.deps.Log.Error("queueing webhooks failed; retrying", "err", err, "retry_in", wait.String())
			wait = min(2*wait, 5*time.Second)
		case err == nil:
			wait = d.cfg.Interval
			if read == d.cfg.QueueBatch && marked > 0 {
				continue // more waiting
			}
		}
		sleep(ctx, wait)
	}
}

// endpointLoop delivers one endpoint's due webhooks, Concurrency at a time.
func (d *Deliverer) endpointLoop(ctx context.Context, ep webhook.Endpoint) {
	log := d.deps.Log.With("endpoint", ep.Name)
	wait := d.cfg.Interval
	for ctx.Err() == nil {
		n, err := d.DeliverOnce(ctx, ep)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("webhook pass failed; retrying", "err", err, "retry_in", wait.String())
			wait = min(2*wait, 5*time.Second)
		case err == nil:
			wait = d.cfg.Interval
			if n == d.cfg.Concurrency {
				continue // maybe more due
			}
		}
		sleep(ctx, wait)
	}
}

// DeliverOnce claims up to Concurrency due webhooks of ep, sends them at
// once and records their outcomes; it returns how many it claimed. A
// claim's sends and records are finished even when ctx ends meanwhile.
func (d *Deliverer) DeliverOnce(ctx context.Context, ep webhook.Endpoint) (int, error) {
	at := time.Now() // before the claim: its lease starts no sooner
	cctx, cancel := context.WithTimeout(ctx, finishTimeout)
	claimed, err := d.deps.Orders.ClaimWebhooks(cctx, ep.Name, d.cfg.Concurrency, d.cfg.Lease)
	cancel()
	if err != nil || len(claimed) == 0 {
		return 0, err
	}
	outs := make([]order.WebhookOutcome, len(claimed))
	var wg sync.WaitGroup
	for i, del := range claimed {
		wg.Go(func() { outs[i] = d.attempt(context.WithoutCancel(ctx), ep, del, at) })
	}
	wg.Wait()
	var sent []order.WebhookOutcome
	for _, o := range outs {
		if o.ID != 0 {
			sent = append(sent, o)
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	res, err := d.deps.Orders.FinishWebhooks(fctx, sent)
	cancel()
	if err != nil {
		// The attempts stay leased; once the lease runs out they are sent
		// again (a delivered one twice: at least once).
		return len(claimed), fmt.Errorf("recording %d webhook attempts: %w", len(sent), err)
	}
	m := d.deps.Metrics.WebhookDeliveries
	m.WithLabelValues(ep.Name, "delivered").Add(float64(res.Delivered))
	m.WithLabelValues(ep.Name, "retried").Add(float64(res.Retried))
	m.WithLabelValues(ep.Name, "failed").Add(float64(res.Failed))
	if res.Failed > 0 {
		d.deps.Log.Warn("webhooks gave up after the retry window; kept for orderpipe webhooks replay", "endpoint", ep.Name,
			"failed", res.Failed, "retry_for", d.cfg.RetryFor.String())
	}
	if res.Stale > 0 {
		d.deps.Log.Warn("webhook attempts outlived their lease; another claim took them over", "endpoint", ep.Name, "stale", res.Stale)
	}
	return len(claimed), nil
}

// attempt sends one claimed webhook and says what came of it; a zero
// outcome (ID 0) when it was not sent because less than Timeout of its
// lease is left (the process was paused): the row is left to the lease.
func (d *Deliverer) attempt(ctx context.Context, ep webhook.Endpoint, del order.WebhookDelivery, claimedAt time.Time) order.WebhookOutcome {
	out := order.WebhookOutcome{ID: del.ID, LeaseNo: del.LeaseNo}
	if time.Since(claimedAt) > d.cfg.Lease-d.cfg.Timeout {
		return order.WebhookOutcome{}
	}
	status, err := d.send(ctx, ep, del)
	out.HTTPStatus = status
	if err == nil {
		out.Delivered = true
		return out
	}
	out.Error = err.Error()
	out.RetryIn = d.backoff(del.Attempts)
	d.deps.Log.Debug("webhook attempt failed", "endpoint", ep.Name, "webhook_id", webhook.MessageID(del.OrderNo, del.Version),
		"attempt", del.Attempts, "err", err, "retry_in", out.RetryIn.String())
	return out
}

// backoff is the wait after the attempt-th failed attempt: full jitter.
func (d *Deliverer) backoff(attempt int) time.Duration {
	ceiling := d.cfg.BackoffMax
	if attempt < 40 {
		ceiling = min(ceiling, d.cfg.BackoffBase<<max(attempt-1, 0))
	}
	return rand.N(ceiling + 1)
}

// Message is the body of a webhook.
type Message struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// Body is the webhook body of an outbox payload: its orders.status event
// exactly as the relay publishes it, under the type order.<status>.
func Body(payload []byte) ([]byte, error) {
	st, err := event.ParseStored(payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(Message{Type: "order." + strings.ToLower(st.Status), Timestamp: st.At.UTC().Format(time.RFC3339Nano),
		Data: st.Marshal()})
}

var userAgent = "orderpipe-webhook/" + version.Get().Version

// maxErrorBody is how much of a refusal's body is kept as its error.
const maxErrorBody = 256

// send POSTs del to ep and returns the answer's status (0: none) and an
// error unless it was a 2xx.
func (d *Deliverer) send(ctx context.Context, ep webhook.Endpoint, del order.WebhookDelivery) (int, error) {
	body, err := Body(del.Payload)
	if err != nil {
		// Only pkg/order's SQL writes payloads: this is a bug, retried in
		// vain until it gives up, and listed then.
		d.deps.Log.Error("status event does not decode", "order_no", del.OrderNo, "version", del.Version, "err", err)
		return 0, fmt.Errorf("event does not decode: %w", err)
	}
	id := webhook.MessageID(del.OrderNo, del.Version)
	ts := clock.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		return 0, errors.New("building the request failed") // the URL was checked at start; never quote it
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", d.cfg.Secret.Sign(id, ts, body))
	res, err := d.clients[ep.Name].Do(req)
	if err != nil {
		return 0, errors.New(describe(err, d.cfg.Timeout))
	}
	defer res.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10)) //nolint:errcheck // reuse the connection when cheap
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return res.StatusCode, nil
	}
	msg := "HTTP " + strconv.Itoa(res.StatusCode)
	if s := strings.Join(strings.Fields(string(snippet)), " "); s != "" {
		msg += ": " + s
	}
	return res.StatusCode, errors.New(msg)
}

// describe is a send's error without the URL the http package puts in it
// (it may carry credentials).
func describe(err error, timeout time.Duration) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			err = inner
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
		return "no answer within " + timeout.String()
	}
	return err.Error()
}

// housekeeping counts the backlog gauges and prunes delivered rows.
func (d *Deliverer) housekeeping(ctx context.Context) {
	var lastPrune time.Time
	for ctx.Err() == nil {
		d.Gauge(ctx)
		if time.Since(lastPrune) >= d.cfg.PruneInterval {
			lastPrune = time.Now()
			pctx, cancel := context.WithTimeout(ctx, finishTimeout)
			if _, err := d.deps.Orders.PruneWebhooks(pctx, d.cfg.Retention, 5000); err != nil && ctx.Err() == nil {
				d.deps.Log.Error("pruning delivered webhooks failed", "err", err)
			}
			cancel()
		}
		sleep(ctx, d.cfg.GaugeInterval)
	}
}

// Gauge sets the backlog gauges (left as they were if Postgres cannot say).
func (d *Deliverer) Gauge(ctx context.Context) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	bs, err := d.deps.Orders.WebhookBacklogs(gctx, d.names)
	if err != nil {
		return
	}
	for _, b := range bs {
		d.deps.Metrics.WebhookPending.WithLabelValues(b.Endpoint).Set(float64(b.Pending))
		d.deps.Metrics.WebhookOldest.WithLabelValues(b.Endpoint).Set(b.Oldest.Seconds())
		d.deps.Metrics.WebhookFailed.WithLabelValues(b.Endpoint).Set(float64(b.Failed))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
