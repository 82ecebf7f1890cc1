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
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// Config is the gateway's configuration.
type Config struct {
	Addr           string        // HTTP_ADDR
	AdminToken     string        // ADMIN_TOKEN; empty ⇒ admin API off
	ReserveTimeout time.Duration // bound on the reserve script call
	ProduceTimeout time.Duration // bound on producing one event
	ShutdownGrace  time.Duration // in-flight requests finish within this on stop
}

func (c *Config) defaults() {
	if c.Addr == "" {
		c.Addr = ":8080"
	}
	if c.ReserveTimeout <= 0 {
		c.ReserveTimeout = time.Second
	}
	if c.ProduceTimeout <= 0 {
		c.ProduceTimeout = 3 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
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
	// NowFunc is the clock (tests move it); nil ⇒ time.Now.
	NowFunc func() time.Time
}

// Server is the gateway.
type Server struct {
	cfg  Config
	deps Deps
	mux  *http.ServeMux
}

// New builds the gateway.
func New(cfg Config, deps Deps) *Server {
	cfg.defaults()
	if deps.NowFunc == nil {
		deps.NowFunc = time.Now
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	s := &Server{cfg: cfg, deps: deps, mux: http.NewServeMux()}
	s.routes()
	return s
}

func (s *Server) routes() {
	s.handle("POST /v1/orders", s.createOrder)
	s.handle("GET /v1/orders/{orderNo}", s.getOrder)
	if s.cfg.AdminToken != "" {
		s.handle("PUT /admin/v1/activities/{activityId}", s.admin(s.putActivity))
		s.handle("POST /admin/v1/activities/{activityId}/preheat", s.admin(s.preheat))
	}
	s.handle("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.handle("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", s.deps.Metrics.Handler())
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "no such route: "+r.Method+" "+r.URL.Path)
	})
}

// handle registers a route and counts its outcomes by route pattern.
func (s *Server) handle(pattern string, h http.HandlerFunc) {
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h(rec, r)
		code := rec.code
		if code == "" {
			code = strconv.Itoa(rec.status)
		}
		s.deps.Metrics.Requests.WithLabelValues(pattern, code).Inc()
	}))
}

// Handler is the gateway's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Run serves on cfg.Addr until ctx ends, then lets in-flight requests finish.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
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

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	status := map[string]string{}
	ready := true
	for name, ping := range s.deps.Ready {
		if err := ping(ctx); err != nil {
			status[name] = err.Error()
			ready = false
			continue
		}
		status[name] = "ok"
	}
	if !ready {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "checks": status})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "checks": status})
}

// newOrderNo makes an order number that names its item, so a lookup finds
// the reservation's Redis keys before the order reaches Postgres:
// "<activityId>-<itemId>-<time base36><random hex>".
func newOrderNo(activityID, itemID int64, now time.Time) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return fmt.Sprintf("%d-%d-%s%s", activityID, itemID, strconv.FormatInt(now.UnixMilli(), 36), hex.EncodeToString(b[:]))
}

// parseOrderNo returns the item an order number names.
func parseOrderNo(s string) (stock.Item, bool) {
	var it stock.Item
	var rest string
	if n, err := fmt.Sscanf(s, "%d-%d-%s", &it.ActivityID, &it.ItemID, &rest); err != nil || n != 3 {
		return stock.Item{}, false
	}
	if it.ActivityID <= 0 || it.ItemID <= 0 || len(s) > 96 {
		return stock.Item{}, false
	}
	return it, true
}
