// Package telemetry owns the process's observability plumbing: the
// Prometheus metrics every component records, the structured logger, and
// OpenTelemetry tracing (setup from OTEL_*, the order attributes every span
// about one order carries, Redis spans). It never decides anything about
// orders.
package telemetry

import (
	"log/slog"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"orderpipe/pkg/secret"
	"orderpipe/pkg/version"
)

// Metrics are all series of all components; one set per registry, so `all`
// serves every component's series on one /metrics.
type Metrics struct {
	Registry *prometheus.Registry

	Requests       *prometheus.CounterVec   // route, code
	HTTPSeconds    *prometheus.HistogramVec // route
	RateLimited    *prometheus.CounterVec   // scope: user, global
	StockRemaining *prometheus.GaugeVec     // activity, item
	BreakerState   *prometheus.GaugeVec     // name; 0 closed, 1 half-open, 2 open
	ReserveSeconds prometheus.Histogram
	// ReserveUnreplicated counts reserves answered 503 because fewer than
	// REDIS_WAIT_REPLICAS replicas acknowledged them in time.
	ReserveUnreplicated prometheus.Counter
	ProduceSeconds      prometheus.Histogram
	ProduceBatch        prometheus.Histogram // messages per produce request (GATEWAY_PRODUCER=group)
	// SaleChecks counts the gateway's lost-sale checks by result: queried,
	// remembered (an answer reused or shared), refused (over its budget).
	SaleChecks *prometheus.CounterVec
	// VerdictRefusals counts new order requests refused from an item's
	// verdict without the reserve script, by code (SOLD_OUT, NOT_ON_SALE).
	VerdictRefusals *prometheus.CounterVec

	BatchSize            prometheus.Histogram
	BatchCommitSeconds   prometheus.Histogram
	ConsumerLag          prometheus.Gauge
	OrdersCreated        prometheus.Counter
	OrdersRejected       *prometheus.CounterVec // reason
	Duplicates           prometheus.Counter
	Ghosts               prometheus.Counter
	DLQ                  prometheus.Counter
	CompensationsApplied prometheus.Counter
	CompensationsFailed  prometheus.Counter
	CompensationsPending prometheus.Gauge
	CompensationsOldest  prometheus.Gauge
	OrdersClosed         prometheus.Counter
	CloserPasses         *prometheus.CounterVec // result: ok, error

	Redriven              prometheus.Counter
	RedriveAcked          prometheus.Counter
	RedrivePasses         *prometheus.CounterVec // result: ok, error, skipped
	ReconcilerDrift       *prometheus.GaugeVec   // activity, item
	ReconcilerMarkerDrift *prometheus.GaugeVec   // activity, item
	ReconcilerSaleDrift   *prometheus.GaugeVec   // activity, item
	ReconcilerPasses      *prometheus.CounterVec // result
	ReconcilerRepairs     *prometheus.CounterVec // activity, item
	// ReconcilerLastSuccess is when a pass last checked every item (clean
	// or drift found, and a fix that did not fail); ReconcilerInterval is
	// the loop's RECONCILE_INTERVAL. Together they say a scheduled
	// reconciliation is overdue: a stale-check alert needs no copy of the
	// interval. Both are 0 in a process that runs no reconciler loop.
	ReconcilerLastSuccess prometheus.Gauge
	ReconcilerInterval    prometheus.Gauge
	// ReconcilerLastPassError and ReconcilerLastPassRepaired say what the
	// last pass alone found: a --once run pushed to a Pushgateway starts its
	// counters from 0, so the alerts read these beside the counters.
	ReconcilerLastPassError    prometheus.Gauge
	ReconcilerLastPassRepaired *prometheus.GaugeVec // activity, item

	// The relay of orders.status (worker/relay).
	StatusPublished *prometheus.CounterVec // status
	StatusFailed    prometheus.Counter
	StatusPending   prometheus.Gauge
	StatusOldest    prometheus.Gauge
	StatusPruned    prometheus.Counter
	RelayPasses     *prometheus.CounterVec // result: ok, error

	WebhookDeliveries *prometheus.CounterVec // endpoint, outcome: delivered, retried, failed
	WebhookPending    *prometheus.GaugeVec   // endpoint
	WebhookOldest     *prometheus.GaugeVec   // endpoint
	WebhookFailed     *prometheus.GaugeVec   // endpoint
}

// NewMetrics registers every series on a fresh registry, with Go and
// process collectors.
// It is long on purpose: one flat declaration per series with its help, which reads best as a single list.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Which build runs, as the usual constant-1 info series: join it on
	// instance to see a rollout's progress, or alert on mixed versions.
	v := version.Get()
	buildInfo := gaugeVec("orderpipe_build_info",
		"Always 1; the labels say which build of orderpipe this process runs.", "version", "commit", "goversion")
	buildInfo.WithLabelValues(v.Version, v.Commit, v.GoVersion).Set(1)
	reg.MustRegister(buildInfo)
	latency := []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5}
	m := &Metrics{
		Registry: reg,
		VerdictRefusals: counterVec("orderpipe_verdict_refusals_total",
			"New order requests refused from the gateway's verdict of Redis's last refusal of the item (VERDICT_TTL), without running the reserve script, by code.", "code"),
		RateLimited: counterVec("orderpipe_rate_limited_total",
			"Order requests refused with 429, by limit scope.", "scope"),
		BreakerState: gaugeVec("orderpipe_breaker_state",
			"Circuit breaker state by dependency: 0 closed, 1 half-open, 2 open.", "name"),
		Requests: counterVec("orderpipe_http_requests_total",
			"HTTP requests by route pattern and outcome code (the error code, or the status for successes).", "route", "code"),
		HTTPSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "orderpipe_http_request_duration_seconds",
			Help:    "Time from a request's routing to its answer, by route pattern (the intake latency is route=\"POST /v1/orders\").",
			Buckets: latency}, []string{"route"}),
		StockRemaining: gaugeVec("orderpipe_stock_remaining",
			"Redis stock of an activity item as the last reserve script this gateway ran for it saw it (after its reservation). Each gateway reports its own view: aggregate with min.",
			"activity", "item"),
		ReserveSeconds: histogram("orderpipe_reserve_seconds",
			"Latency of the reserve script round trip.", latency),
		ReserveUnreplicated: counter("orderpipe_reserve_unreplicated_total",
			"Reserves (and replays) answered 503 because fewer than REDIS_WAIT_REPLICAS Redis replicas acknowledged them within REDIS_WAIT_TIMEOUT; a reservation is given back."),
		ProduceSeconds: histogram("orderpipe_produce_seconds",
			"Latency of producing an event to Kafka (acks from all in-sync replicas).", latency),
		ProduceBatch: histogram("orderpipe_produce_batch_messages",
			"Events per produce request of the gateway's group-committing producer (GATEWAY_PRODUCER=group): the orders that arrived while the partition's previous request was in flight.", prometheus.ExponentialBuckets(1, 2, 10)),
		BatchSize: histogram("orderpipe_worker_batch_size",
			"Messages per worker batch.", prometheus.ExponentialBuckets(1, 2, 12)),
		BatchCommitSeconds: histogram("orderpipe_worker_batch_commit_seconds",
			"Duration of a worker batch's Postgres transaction, begin to commit (committed batches only).", latency),
		ConsumerLag: gauge("orderpipe_worker_consumer_lag_messages",
			"Messages of the order topic the worker group has not committed yet, summed over all partitions (high watermark minus committed offset, or minus log start where nothing is committed); read from the broker every WORKER_LAG_INTERVAL, also while batches fail. Every worker reports the same group total: aggregate with max, not sum."),
		OrdersCreated: counter("orderpipe_orders_created_total",
			"Orders written to Postgres."),
		OrdersRejected: counterVec("orderpipe_orders_rejected_total",
			"Reservations Postgres rejected, by reason (DB_STOCK_MISMATCH is an alert).", "reason"),
		Duplicates: counter("orderpipe_worker_duplicates_total",
			"Redelivered messages skipped by the idempotency table."),
		Ghosts: counter("orderpipe_worker_ghosts_total",
			"Events whose reservation the gateway had already aborted (produce looked failed but arrived)."),
		DLQ: counter("orderpipe_worker_dlq_total",
			"Messages sent to the dead-letter topic."),
		CompensationsApplied: counter("orderpipe_compensations_applied_total",
			"Redis compensations applied by the release script."),
		CompensationsFailed: counter("orderpipe_compensations_failed_total",
			"Failed attempts to apply a Redis compensation (retried)."),
		CompensationsPending: gauge("orderpipe_compensations_pending",
			"Compensations written but not yet applied in Redis."),
		CompensationsOldest: gauge("orderpipe_compensations_oldest_pending_seconds",
			"Age of the oldest compensation not yet applied in Redis (database clock); 0 when none is pending."),
		CloserPasses: counterVec("orderpipe_closer_passes_total",
			"Closer passes by result: ok (completed), error (ended early; the next pass retries).", "result"),
		OrdersClosed: counter("orderpipe_orders_closed_total",
			"UNPAID orders the closer closed (stock given back)."),
		Redriven: counter("orderpipe_redrive_republished_total",
			"Journal entries re-published to Kafka because no worker had decided them (a gateway died before its produce)."),
		RedriveAcked: counter("orderpipe_redrive_acked_total",
			"Journal entries of created orders the redrive acknowledged (a worker died before its ack)."),
		RedrivePasses: counterVec("orderpipe_redrive_passes_total",
			"Redrive passes by result: ok (completed), error (failed; retried next interval), skipped (another replica holds the redrive lock).", "result"),
		ReconcilerDrift: gaugeVec("orderpipe_reconciler_drift",
			"Redis stock minus (DB stock minus in flight) per item at the last reconciler pass; 0 when consistent.", "activity", "item"),
		ReconcilerSaleDrift: gaugeVec("orderpipe_reconciler_sale_drift",
			"1 when the item's sale (window, cap, buckets) or stock key in Redis is missing, unreadable or not what Postgres says at the last reconciler pass, else 0.", "activity", "item"),
		ReconcilerMarkerDrift: gaugeVec("orderpipe_reconciler_marker_drift",
			"Limit markers missing, extra or held by the wrong request per item at the last reconciler pass.", "activity", "item"),
		SaleChecks: counterVec("orderpipe_gateway_sale_checks_total",
			"Postgres checks of an item Redis has no sale of, by result: queried, remembered (an answer reused or shared), refused (over the check's budget: answered 503).", "result"),
		ReconcilerPasses: counterVec("orderpipe_reconciler_passes_total",
			"Reconciler passes by result: clean, drift (left after the pass), repaired (found and all repaired by --fix), error.", "result"),
		ReconcilerRepairs: counterVec("orderpipe_reconciler_repairs_total",
			"Items whose drift the reconciler's --fix repaired (stock, markers or sale window), per item.", "activity", "item"),
		ReconcilerLastSuccess: gauge("orderpipe_reconciler_last_success_timestamp_seconds",
			"Unix time of the last reconciler pass that checked every item (clean or drift; with --fix, a fix that did not fail); 0 before the first."),
		ReconcilerInterval: gauge("orderpipe_reconciler_interval_seconds",
			"RECONCILE_INTERVAL of the reconciler loop this process runs (of a pushed --once run: its schedule's period); 0 where none runs."),
		ReconcilerLastPassError: gauge("orderpipe_reconciler_last_pass_error",
			"1 when the last reconciler pass could not check every item (or could not run, or its fix failed), else 0."),
		ReconcilerLastPassRepaired: gaugeVec("orderpipe_reconciler_last_pass_repaired",
			"1 when the last reconciler pass's --fix repaired the item, else 0.", "activity", "item"),
		StatusPublished: counterVec("orderpipe_status_events_published_total",
			"orders.status events the relay published (acknowledged by all in-sync replicas and marked published), by status; a republished one counts again.", "status"),
		StatusFailed: counter("orderpipe_status_events_failed_total",
			"orders.status events whose publish failed (left unpublished, retried)."),
		StatusPending: gauge("orderpipe_status_outbox_pending",
			"orders.status events committed in the outbox (order_events) but not yet published, as the relay last counted them."),
		StatusOldest: gauge("orderpipe_status_outbox_oldest_pending_seconds",
			"Age of the oldest unpublished orders.status event (database clock); 0 when none is pending."),
		StatusPruned: counter("orderpipe_status_events_pruned_total",
			"Published orders.status outbox rows deleted after STATUS_RETENTION."),
		RelayPasses: counterVec("orderpipe_relay_passes_total",
			"Relay passes by result: ok (the outbox drained as far as it could), error (Postgres or the broker failed; retried with backoff).", "result"),
		WebhookDeliveries: counterVec("orderpipe_webhook_deliveries_total",
			"Webhook attempts by endpoint (scheme://host/path, no credentials) and outcome: delivered (a 2xx), retried (any other answer or none in WEBHOOK_TIMEOUT; retried with backoff), failed (gave up after WEBHOOK_RETRY_FOR; kept for `orderpipe webhooks replay`).", "endpoint", "outcome"),
		WebhookPending: gaugeVec("orderpipe_webhook_pending",
			"orders.status events queued for the endpoint and not delivered yet (nor given up), as the deliverer last counted them.", "endpoint"),
		WebhookOldest: gaugeVec("orderpipe_webhook_oldest_undelivered_seconds",
			"Age of the oldest orders.status event the endpoint has not received yet (database clock; events not queued yet count for every endpoint); 0 when none waits.", "endpoint"),
		WebhookFailed: gaugeVec("orderpipe_webhook_failed_deliveries",
			"Deliveries to the endpoint that gave up after WEBHOOK_RETRY_FOR and were not replayed (`orderpipe webhooks list`).", "endpoint"),
	}
	// One list, so a new series cannot be declared and left unregistered.
	reg.MustRegister(m.Requests, m.RateLimited, m.BreakerState, m.ReserveSeconds, m.ReserveUnreplicated, m.ProduceSeconds, m.ProduceBatch, m.BatchSize,
		m.ConsumerLag, m.OrdersCreated, m.OrdersRejected, m.Duplicates, m.Ghosts, m.DLQ, m.CompensationsApplied,
		m.CompensationsFailed, m.CompensationsPending, m.OrdersClosed, m.Redriven, m.RedriveAcked, m.ReconcilerDrift,
		m.ReconcilerMarkerDrift, m.ReconcilerSaleDrift, m.ReconcilerPasses, m.ReconcilerRepairs, m.HTTPSeconds, m.StockRemaining, m.BatchCommitSeconds,
		m.CompensationsOldest, m.CloserPasses, m.RedrivePasses,
		m.SaleChecks, m.VerdictRefusals, m.ReconcilerLastSuccess, m.ReconcilerInterval, m.ReconcilerLastPassError, m.ReconcilerLastPassRepaired,
		m.StatusPublished, m.StatusFailed, m.StatusPending, m.StatusOldest, m.StatusPruned, m.RelayPasses,
		m.WebhookDeliveries, m.WebhookPending, m.WebhookOldest, m.WebhookFailed)
	// Every result is a series from the start, so an alert on a rate of
	// passes works before the first pass (and sees a component that never
	// completes one).
	for _, r := range []string{"ok", "error"} {
		m.CloserPasses.WithLabelValues(r)
		m.RedrivePasses.WithLabelValues(r)
		m.RelayPasses.WithLabelValues(r)
	}
	for _, st := range []string{"UNPAID", "PAID", "CLOSED", "REJECTED"} {
		m.StatusPublished.WithLabelValues(st)
	}
	for _, r := range []string{"queried", "remembered", "refused"} {
		m.SaleChecks.WithLabelValues(r)
	}
	m.RedrivePasses.WithLabelValues("skipped")
	for _, r := range []string{"clean", "drift", "repaired", "error"} {
		m.ReconcilerPasses.WithLabelValues(r)
	}
	m.RateLimited.WithLabelValues("user")
	m.VerdictRefusals.WithLabelValues("SOLD_OUT")
	m.VerdictRefusals.WithLabelValues("NOT_ON_SALE")
	m.RateLimited.WithLabelValues("global")
	return m
}

// counter, counterVec, gauge, gaugeVec and histogram keep NewMetrics's list
// to what differs per series: its name, help, and labels or buckets.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// NewLogger is the process logger: JSON lines on stderr; a line logged with
// a *Context method carries the trace_id and span_id of the context's span
// (and the request_id of its order, see TraceHandler).
func NewLogger() *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("LOG_LEVEL") == "debug" {
		level = slog.LevelDebug
	}
	// Secrets the configuration registered never reach the output, even in
	// an error a library formatted.
	return slog.New(NewTraceHandler(secret.Handler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))))
}
