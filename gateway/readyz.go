package gateway

import (
	"context"
	"net/http"
	"sync"
	"time"

	"orderpipe/gateway/client"
)

// /readyz is unauthenticated and each probe of it dials a new broker
// connection (TLS, SASL and a metadata request) and pings Redis: answered
// afresh each time, a flood of probes would be a flood on both. So one probe
// runs at a time, callers that arrive meanwhile share its answer, and the
// answer is reused for readyFor after the probe started: a dependency that
// goes down is seen within readyFor plus one probe.

// readyFor is how long a readiness answer is reused.
const readyFor = time.Second

// readyTimeout bounds one probe of every dependency.
const readyTimeout = 2 * time.Second

type readiness struct {
	mu      sync.Mutex
	at      time.Time         // when the answer's probe started (monotonic); zero ⇒ none yet
	checks  map[string]string // dependency → "ok" or "unavailable"
	ok      bool              // the map is never changed once stored: callers share it
	probing chan struct{}     // closed when the probe in flight is done; nil ⇒ none
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	checks, ok := s.readiness(r.Context())
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, client.Readiness{Status: "unavailable", Checks: checks})
		return
	}
	writeJSON(w, http.StatusOK, client.Readiness{Status: "ok", Checks: checks})
}

// readiness is the current answer: reused while fresh, else the answer of
// the probe in flight, else of a new probe this caller runs. A caller that
// hangs up while waiting is told "not ready" (it reads no answer anyway).
func (s *Server) readiness(ctx context.Context) (map[string]string, bool) {
	rd := &s.ready
	rd.mu.Lock()
	for {
		if !rd.at.IsZero() && s.monoNow().Sub(rd.at) < readyFor {
			checks, ok := rd.checks, rd.ok
			rd.mu.Unlock()
			return checks, ok
		}
		if rd.probing == nil {
			break
		}
		done := rd.probing
		rd.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return map[string]string{}, false
		}
		rd.mu.Lock()
	}
	done := make(chan struct{})
	rd.probing = done
	rd.mu.Unlock()

	started := s.monoNow()
	// Not the caller's context: the others sharing this probe must not be
	// told "unavailable" because the first caller hung up.
	checks, ok := s.probe(context.WithoutCancel(ctx))

	rd.mu.Lock()
	rd.at, rd.checks, rd.ok, rd.probing = started, checks, ok, nil
	close(done)
	rd.mu.Unlock()
	return checks, ok
}

// probe asks every dependency once.
func (s *Server) probe(ctx context.Context) (map[string]string, bool) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	checks := map[string]string{}
	ok := true
	for name, ping := range s.deps.Ready {
		if err := ping(ctx); err != nil {
			// The probe is unauthenticated: addresses and DSNs go to the log only.
			s.deps.Log.WarnContext(ctx, "not ready", "dependency", name, "err", err)
			checks[name] = "unavailable"
			ok = false
			continue
		}
		checks[name] = "ok"
	}
	return checks, ok
}
