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
// JSON 202 of the gateway's shape, fixed; floorRefusal, for a sold-out
// flood's floor (--floor-status 409), the gateway's SOLD_OUT answer.
var (
	floorAnswer  = []byte(`{"requestId":"floor","orderNo":"0-0-floor","status":"PENDING","remaining":0}` + "\n")
	floorRefusal = []byte(`{"error":{"code":"SOLD_OUT","message":"not enough stock"}}` + "\n")
)

// floorHandler is the floor of a run: a Go net/http server that reads the
// request's body and answers a fixed 202 (or, status 409, a fixed
// SOLD_OUT), with nothing behind it. Whatever latency it shows at a rate is
// what this machine, Go's HTTP server and the load tool cost before the
// gateway does anything.
func floorHandler(status int) http.Handler {
	body := floorAnswer
	if status == http.StatusConflict {
		body = floorRefusal
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, "reading body", http.StatusBadRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		w.Write(body) //nolint:errcheck
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

// ServeFloor serves the trivial handler on addr until ctx ends (`orderpipe
// bench --serve-floor ADDR`; bench/run.sh starts it in a process of its
// own, so it shares neither the gateway's nor the load tool's runtime). The
// server's timeouts are the gateway's defaults.
func ServeFloor(ctx context.Context, addr string, ready func(net.Addr)) error {
	return ServeFloorStatus(ctx, addr, http.StatusAccepted, ready)
}

// ServeFloorStatus is ServeFloor answering every order with status: 202 (an
// accepted order) or 409 (SOLD_OUT, the floor of a sold-out flood).
func ServeFloorStatus(ctx context.Context, addr string, status int, ready func(net.Addr)) error {
	if status != http.StatusAccepted && status != http.StatusConflict {
		return fmt.Errorf("floor server: status %d: want 202 or 409", status)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("floor server: %w", err)
	}
	srv := &http.Server{Handler: floorHandler(status), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
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
