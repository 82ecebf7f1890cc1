// Package gateway is the HTTP service storefronts call. It validates an
// order request, runs the reserve script (one Redis round trip), produces the
// event and only then answers 202. It never touches Postgres on the hot path
// of POST /v1/orders; Postgres serves order lookups and the admin API.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/breaker"
	"orderpipe/pkg/clock"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// Config is the gateway's configuration.
type Config struct {
	Addr           string        // HTTP_ADDR
	AdminToken     string        // ADMIN_TOKEN; empty ⇒ admin API off
	ReserveTimeout time.Duration // bound on the reserve script call
	ProduceTimeout time.Duration // bound on producing one event
	// ReplayWait (REPLAY_WAIT) bounds how long a retry waits for its first
	// attempt's event to become durable before answering 503; default 2 s,
	// at most ProduceTimeout.
	ReplayWait    time.Duration
	ShutdownGrace time.Duration // in-flight requests finish within this on stop
	// AdminAddr, when set, serves the admin API on its own listener instead
	// of HTTP_ADDR.
	AdminAddr string
	// APITokens, when not empty, are the bearer tokens the order API accepts.
	APITokens []string
	// Rate limits (RATE_LIMIT_*): per user and, when GlobalRPS > 0, global.
	UserRPS     float64
	UserBurst   int
	GlobalRPS   float64
	GlobalBurst int
	// BreakerOpenFor is how long a tripped breaker refuses calls before probing.
	BreakerOpenFor time.Duration
	// Topic is the topic the Producer writes to (names the send span).
	Topic string
	// VerdictTTL (VERDICT_TTL) is how long a refusal of Redis's (sold
	// out, outside the sale window) refuses new requests for the item
	// without the reserve script (stock.Reserver); 0: the default,
	// negative: off.
	VerdictTTL time.Duration
	// Producer is which producer Start gives the gateway (GATEWAY_PRODUCER):
	// "group" (event.Producer) or "writer" (kafka-go's Writer).
	Producer string
	// CloseAfter is the closer's CLOSE_AFTER (the root passes it on): an
	// order's payBy is its reservedAt + CloseAfter.
	CloseAfter time.Duration
}

func (c *Config) defaults() {
	if c.Addr == "" {
		c.Addr = addrVar.Default
	}
	setting.DefaultTo(&c.ReserveTimeout, redisconn.TimeoutVar.Duration())
	setting.DefaultTo(&c.ProduceTimeout, produceTimeoutVar.Duration())
	setting.DefaultTo(&c.CloseAfter, order.CloseAfterVar.Duration())
	setting.DefaultTo(&c.ReplayWait, replayWaitVar.Duration())
	// Waiting longer than the first attempt's produce can take is pointless.
	c.ReplayWait = min(c.ReplayWait, c.ProduceTimeout)
	if c.VerdictTTL == 0 {
		c.VerdictTTL = verdictTTLVar.Duration()
	}
	setting.DefaultTo(&c.ShutdownGrace, 10*time.Second)
	setting.DefaultTo(&c.UserBurst, max(1, int(2*c.UserRPS)))
	setting.DefaultTo(&c.GlobalBurst, max(1, int(c.GlobalRPS/10)))
	if c.Topic == "" {
		c.Topic = event.Topic
	}
}

// Producer sends events; *kafka.Writer is one.
type Producer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// PingFunc checks a dependency for /readyz.
type PingFunc func(ctx context.Context) error

// Deps are the gateway's collaborators.
type Deps struct {
	Stock    *stock.Store
	Orders   *order.Store
	Producer Producer
	Metrics  *telemetry.Metrics
	Log      *slog.Logger
	// Ready checks, by dependency name.
	Ready map[string]PingFunc
	// NowFunc is the clock (tests move it); nil ⇒ clock.Now.
	NowFunc func() time.Time
	// TickFunc measures this process's own intervals (the rate limits);
	// nil ⇒ time.Now, whose monotonic reading no clock step moves.
	TickFunc func() time.Time
}

// Server is the gateway.
type Server struct {
	cfg      Config
	deps     Deps
	mux      *http.ServeMux
	adminMux *http.ServeMux // == mux unless AdminAddr is set
	// handler and adminHandler are the muxes inside their server spans.
	handler, adminHandler http.Handler
	limiter               *limiter
	redisCB               *breaker.Breaker
	kafkaCB               *breaker.Breaker
	pgCB                  *breaker.Breaker
	// salesCB guards the lost-sale check's queries (lostsale.go) apart
	// from pgCB: a flood of them must not take GET and pay down.
	salesCB *breaker.Breaker
	// verdictRefusals is orderpipe_verdict_refusals_total's child of each
	// outcome a verdict refuses with.
	verdictRefusals map[stock.Outcome]prometheus.Counter
	// stockGauges holds each item's orderpipe_stock_remaining child
	// (stock.Item → prometheus.Gauge), so the hot path hashes no labels.
	stockGauges sync.Map
	// reserver routes order requests to their bucket and runs the reserve
	// script (stock.Reserver).
	reserver *stock.Reserver
	// sales remembers Postgres's word on items Redis has no sale of.
	sales saleMemo
	// replays are the shared waits of retries whose first attempt is in
	// progress (replay.go).
	replays replayWaits
	// later holds the releases to retry once Redis answers (releaselater.go).
	later releasesLater
	// ready is the last /readyz answer (readyz.go).
	ready readiness
	// monoNow reads the monotonic clock the gateway's caches age by (tests
	// move it); never deps.NowFunc, which a clock step moves.
	monoNow func() time.Time
}

// New builds the gateway.
func New(cfg Config, deps Deps) *Server {
	cfg.defaults()
	if deps.NowFunc == nil {
		deps.NowFunc = clock.Now
	}
	if deps.TickFunc == nil {
		deps.TickFunc = time.Now
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	s := &Server{cfg: cfg, deps: deps, mux: http.NewServeMux(), monoNow: time.Now,
		limiter: newLimiter(cfg.UserRPS, cfg.UserBurst, cfg.GlobalRPS, cfg.GlobalBurst)}
	if deps.Stock != nil {
		s.reserver = stock.NewReserver(deps.Stock, cfg.VerdictTTL, func() time.Time { return s.monoNow() })
	}
	s.adminMux = s.mux
	if cfg.AdminAddr != "" {
		s.adminMux = http.NewServeMux()
	}
	bs := breaker.Settings{OpenFor: cfg.BreakerOpenFor}
	s.redisCB = breaker.New("gateway-redis", bs, deps.Metrics.BreakerState)
	s.kafkaCB = breaker.New("gateway-kafka", bs, deps.Metrics.BreakerState)
	s.pgCB = breaker.New("gateway-postgres", bs, deps.Metrics.BreakerState)
	s.salesCB = breaker.New("gateway-postgres-sales", bs, deps.Metrics.BreakerState)
	s.sales = newSaleMemo()
	s.verdictRefusals = map[stock.Outcome]prometheus.Counter{}
	for _, o := range []stock.Outcome{stock.SoldOut, stock.NotOnSale} {
		s.verdictRefusals[o] = deps.Metrics.VerdictRefusals.WithLabelValues(string(o))
	}
	s.routes()
	s.handler = traced(s.cleanPaths(s.mux))
	s.adminHandler = s.handler
	if s.adminMux != s.mux {
		s.adminHandler = traced(s.cleanPaths(s.adminMux))
	}
	return s
}

// cleanPaths answers a request whose path is not clean (path.Clean would
// change it: "//v1/orders", "/v1/./orders", "/v1/orders/../orders", a
// trailing slash) 404 NOT_FOUND, as a path the gateway does not have: no
// route has such a path, and the mux would answer it with a redirect (a
// text body, and a client sending a POST's body again elsewhere). It reads
// the decoded path, so "%2e%2e" and "%2F" segments are refused too: the mux
// cleans only the escaped path, and would hand a handler an orderNo of "..".
func (s *Server) cleanPaths(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; path.Clean(p) != p {
			s.notFound(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// traced wraps a mux in OpenTelemetry HTTP server spans named by the matched
// route pattern ("POST /v1/orders"). A traceparent header sent by the caller
// is continued. Probes and scrapes make no spans. With tracing off (no
// exporter, or sampled always off) the middleware, which costs several
// microseconds per request even when nothing records, is left out: the
// caller's trace context is only passed along (to the Kafka message).
func traced(mux http.Handler) http.Handler {
	if !telemetry.TracingOn() {
		return propagated(mux)
	}
	return otelhttp.NewHandler(mux, "gateway",
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return spanName(r) }),
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics", "/openapi.json":
				return false
			}
			return true
		}))
}

// propagated puts a caller's W3C trace context, if any, in the request's
// context.
func propagated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header["Traceparent"]) > 0 || len(r.Header["Baggage"]) > 0 {
			r = r.WithContext(otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}

// spanName is the route pattern with its method, or just the method before
// (or without) a match.
func spanName(r *http.Request) string {
	switch {
	case r.Pattern == "":
		return r.Method
	case strings.HasPrefix(r.Pattern, r.Method+" "):
		return r.Pattern
	}
	return r.Method + " " + r.Pattern
}

func (s *Server) routes() {
	s.handle("POST /v1/orders", s.api(s.createOrder))
	s.handle("GET /v1/orders/{orderNo}", s.api(s.getOrder))
	s.handle("POST /v1/orders/{orderNo}/pay", s.api(s.payOrder))
	s.handle("POST /v1/orders/{orderNo}/cancel", s.api(s.cancelOrder))
	if s.cfg.AdminToken != "" {
		s.handleOn(s.adminMux, "PUT /admin/v1/activities/{activityId}", s.admin(s.putActivity))
		s.handleOn(s.adminMux, "GET /admin/v1/activities", s.admin(s.listActivities))
		s.handleOn(s.adminMux, "GET /admin/v1/activities/{activityId}", s.admin(s.forActivity(s.getActivity)))
		s.handleOn(s.adminMux, "POST /admin/v1/activities/{activityId}/preheat", s.admin(s.forActivity(s.preheat)))
		s.handleOn(s.adminMux, "POST /admin/v1/activities/{activityId}/end", s.admin(s.forActivity(s.endSale)))
	}
	s.handle("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.handle("GET /readyz", s.readyz)
	s.handle("GET /openapi.json", serveOpenAPI)
	s.mux.Handle("GET /metrics", s.deps.Metrics.Handler())
	s.mux.Handle("/", s.noRoute(s.mux))
	if s.adminMux != s.mux {
		s.adminMux.Handle("/", s.noRoute(s.adminMux))
	}
}

// routeMethods are the methods a route of this API may be served with.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// noRoute answers what no route of mux took, in the API's error body: 405
// METHOD_NOT_ALLOWED with Allow where the path is served with other
// methods, else 404 NOT_FOUND. The mux would tell 405 from 404 itself, but
// a catch-all pattern matches every method, so it asks the mux: which
// methods would a route take on this path? (A GET route takes HEAD too.)
// Only requests no route took pay for the asking.
func (s *Server) noRoute(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range routeMethods {
			if _, pattern := mux.Handler(&http.Request{Method: m, Host: r.Host, URL: r.URL}); pattern != "/" {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			s.notFound(w, r)
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED",
			r.URL.Path+" is served with "+strings.Join(allow, ", ")+", not "+r.Method)
		s.deps.Metrics.Requests.WithLabelValues(unmatchedRoute, "METHOD_NOT_ALLOWED").Inc()
	})
}

// unmatchedRoute is the route label of the requests no route took (404
// NOT_FOUND, 405 METHOD_NOT_ALLOWED): one series, whatever the path.
const unmatchedRoute = "unmatched"

// notFound is the answer to a path the gateway does not have.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "NOT_FOUND", "no such route: "+r.Method+" "+r.URL.Path)
	s.deps.Metrics.Requests.WithLabelValues(unmatchedRoute, "NOT_FOUND").Inc()
}

// handle registers a route and counts its outcomes by route pattern.
func (s *Server) handle(pattern string, h http.HandlerFunc) { s.handleOn(s.mux, pattern, h) }

func (s *Server) handleOn(mux *http.ServeMux, pattern string, h http.HandlerFunc) {
	_, route, _ := strings.Cut(pattern, " ")
	seconds := s.deps.Metrics.HTTPSeconds.WithLabelValues(pattern)
	var byCode sync.Map // code → prometheus.Counter
	mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			span.SetAttributes(semconv.HTTPRoute(route))
			traceResponse(w, span.SpanContext())
		}
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h(rec, r)
		seconds.Observe(time.Since(start).Seconds())
		code := rec.code
		if code == "" {
			code = strconv.Itoa(rec.status)
		}
		// The route's counter of each code, looked up once: a flood's
		// answers hash no labels.
		c, ok := byCode.Load(code)
		if !ok {
			c, _ = byCode.LoadOrStore(code, s.deps.Metrics.Requests.WithLabelValues(pattern, code))
		}
		c.(prometheus.Counter).Inc()
	}))
}

// traceResponse sets the W3C traceresponse header of a sampled request's
// answer (version 00, the trace id, the server span's id, the flags), so a
// storefront can log the trace beside its own records and find it later.
// An unsampled request's trace is exported nowhere: it gets none.
func traceResponse(w http.ResponseWriter, sc trace.SpanContext) {
	if !sc.IsSampled() {
		return
	}
	w.Header()["Traceresponse"] = []string{"00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()}
}

// Handler is the gateway's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// AdminHandler serves the admin API when AdminAddr is set (else Handler does).
func (s *Server) AdminHandler() http.Handler { return s.adminHandler }

// Run serves on cfg.Addr until ctx ends, then lets in-flight requests finish.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves the public API on ln, and the admin API on AdminAddr when
// set, until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.cfg.AdminAddr == "" {
		return s.serve(ctx, ln, s.handler)
	}
	adminLn, err := net.Listen("tcp", s.cfg.AdminAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("listening on %s: %w", s.cfg.AdminAddr, err)
	}
	errc := make(chan error, 2)
	go func() { errc <- s.serve(ctx, ln, s.handler) }()
	go func() { errc <- s.serve(ctx, adminLn, s.adminHandler) }()
	return errors.Join(<-errc, <-errc)
}

func (s *Server) serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving http: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutting down http: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newOrderNo makes an order number that names its item, so a lookup finds
// the reservation's Redis keys before the order reaches Postgres:
// "<activityId>-<itemId>-<time base36><random hex>".
func newOrderNo(activityID, itemID int64, now time.Time) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	out := make([]byte, 0, 64)
	out = strconv.AppendInt(out, activityID, 10)
	out = append(out, '-')
	out = strconv.AppendInt(out, itemID, 10)
	out = append(out, '-')
	out = strconv.AppendInt(out, now.UnixMilli(), 36)
	out = hex.AppendEncode(out, b[:])
	return string(out)
}

// parseOrderNo returns the item an order number names (event.ParseOrderNo).
func parseOrderNo(s string) (stock.Item, bool) {
	a, i, b, ok := event.ParseOrderNo(s)
	return stock.Item{ActivityID: a, ItemID: i, Bucket: b}, ok
}
