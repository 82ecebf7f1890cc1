package chaos

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	randv2 "math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"orderpipe/pkg/invariant"
	"orderpipe/pkg/webhook"
)

// The webhook deliverers: two replicas of `orderpipe webhook`, through the
// Postgres link like the relay, delivering every orders.status event to a
// receiver of the suite's own on a real port, through a link of its own
// ("webhook") that the nemesis cuts, hangs and slows. The checker (pkg/
// invariant, I7) holds the receiver to what the outbox holds: every event,
// signed, each order's in version order. Their faults come from a stream
// of their own (webhookFaults), so the other streams, the seeds' meaning
// before them, are unchanged: a deliverer killed or paused, the receiver
// cut (every connection reset), hung (no answer: WEBHOOK_TIMEOUT) or
// answering 500; the Postgres restarts are the store stream's.

// hookReceiver is the suite's webhook endpoint: it keeps every webhook it
// accepted and answers 204, or 500 while failing is set.
type hookReceiver struct {
	srv     *http.Server
	addr    string
	failing atomic.Bool
	mu      sync.Mutex
	got     []invariant.WebhookReceipt
}

func startHookReceiver() (*hookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &hookReceiver{addr: ln.Addr().String()}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln) //nolint:errcheck // ends with close
	return r, nil
}

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	if r.failing.Load() {
		http.Error(w, "the receiver fails (chaos)", http.StatusInternalServerError)
		return
	}
	r.mu.Lock()
	r.got = append(r.got, invariant.WebhookReceipt{ID: req.Header.Get("webhook-id"), Timestamp: req.Header.Get("webhook-timestamp"),
		Signature: req.Header.Get("webhook-signature"), Body: body})
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *hookReceiver) receipts() []invariant.WebhookReceipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]invariant.WebhookReceipt(nil), r.got...)
}

func (r *hookReceiver) close() { r.srv.Close() }

// startWebhooks starts the receiver, its link and the deliverers' procs
// (not yet started: Start starts them with the other components).
func (s *Suite) startWebhooks() ([]*proc, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	var err error
	if s.hookSecret, err = webhook.ParseSecret(secret); err != nil {
		return nil, err
	}
	if s.hooks, err = startHookReceiver(); err != nil {
		return nil, err
	}
	link, err := s.toxi.add("webhook", s.hooks.addr)
	if err != nil {
		return nil, err
	}
	var procs []*proc
	for i := range 2 {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		// Short timeout and backoff: a cut receiver is caught up within
		// seconds of the fault, as the drain needs.
		p := s.newProc(numbered("webhook", i), healthz("http://"+addr+"/healthz"), "DATABASE_URL="+s.proxiedURL,
			"METRICS_ADDR="+addr, "WEBHOOK_URLS=http://"+link+"/hooks", "WEBHOOK_SECRET="+secret,
			"WEBHOOK_TIMEOUT=1s", "WEBHOOK_BACKOFF_MAX=2s", "WEBHOOK_INTERVAL=100ms")
		p.args = []string{"webhook"}
		procs = append(procs, p)
	}
	return procs, nil
}

// webhookEndpoint is the receiver as the checker judges it.
func (s *Suite) webhookEndpoint() invariant.WebhookEndpoint {
	return invariant.WebhookEndpoint{Name: "chaos receiver", Secret: s.hookSecret, Receipts: s.hooks.receipts, Wait: 2 * time.Minute}
}

// webhookFaults: about one every 2.5 s of load, from a stream of its own,
// on the deliverers and the receiver's link.
func webhookFaults(seed uint64, loadFor time.Duration, deliverers []string) []fault {
	if len(deliverers) == 0 {
		return nil
	}
	rng := randv2.New(randv2.NewPCG(seed, 0x776562686f6f6b))
	return schedule(rng, loadFor, 2500*time.Millisecond, func() fault {
		switch rng.IntN(5) {
		case 0:
			return fault{Kind: "kill", Target: deliverers[rng.IntN(len(deliverers))], For: between(rng, 200*time.Millisecond, 2*time.Second)}
		case 1:
			return fault{Kind: "pause", Target: deliverers[rng.IntN(len(deliverers))], For: between(rng, 300*time.Millisecond, 3300*time.Millisecond)}
		case 2:
			return fault{Kind: "webhook-reset", Target: "webhook-link", For: between(rng, 500*time.Millisecond, 4*time.Second)}
		case 3:
			return fault{Kind: "webhook-hang", Target: "webhook-link", For: between(rng, 500*time.Millisecond, 3*time.Second)}
		}
		return fault{Kind: "webhook-500", Target: "webhook-link", For: between(rng, 500*time.Millisecond, 4*time.Second)}
	}, func(fault) time.Duration { return 0 })
}

// inflictWebhook applies a fault of the receiver's link.
func (s *Suite) inflictWebhook(f fault, at string) (string, error) {
	switch f.Kind {
	case "webhook-reset":
		if err := s.toxi.resetPeer("webhook", 1); err != nil {
			return "webhook reset at " + at, err
		}
		time.Sleep(f.For)
		return fmt.Sprintf("webhook receiver cut (reset_peer) at %s, back at %s", at, s.since()), s.toxi.remove("webhook", "reset")
	case "webhook-hang":
		if err := s.toxi.blackhole("webhook"); err != nil {
			return "webhook hang at " + at, err
		}
		time.Sleep(f.For)
		return fmt.Sprintf("webhook receiver hung (no answer) at %s, back at %s", at, s.since()), s.toxi.remove("webhook", "blackhole")
	}
	s.hooks.failing.Store(true)
	time.Sleep(f.For)
	s.hooks.failing.Store(false)
	return fmt.Sprintf("webhook receiver answered 500 from %s to %s", at, s.since()), nil
}
