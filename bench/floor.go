package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// floorAnswer is what the trivial handler answers to every order: a small
// JSON 202 of the gateway's shape, fixed.
var floorAnswer = []byte(`{"requestId":"floor","orderNo":"0-0-floor","status":"PENDING","remaining":0}` + "\n")

// floorHandler is the floor of an open-loop run: a Go net/http server that
// reads the request's body and answers a fixed 202, with nothing behind it.
// Whatever latency it shows at a rate is what this machine, Go's HTTP
// server and the load tool cost before the gateway does anything.
func floorHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, "reading body", http.StatusBadRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(floorAnswer)))
		w.WriteHeader(http.StatusAccepted)
		w.Write(floorAnswer) //nolint:errcheck
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

// ServeFloor serves the trivial handler on addr until ctx ends (`orderpipe
// bench --serve-floor ADDR`; bench/run.sh starts it in a process of its
// own, so it shares neither the gateway's nor the load tool's runtime). The
// server's timeouts are the gateway's defaults.
func ServeFloor(ctx context.Context, addr string, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("floor server: %w", err)
	}
	srv := &http.Server{Handler: floorHandler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second}
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("floor server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("floor server: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("floor server: %w", err)
	}
	return nil
}
