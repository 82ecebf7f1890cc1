package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"orderpipe/pkg/stock"
)

// A reservation whose event could not be produced is given back at once
// (releaseUnproduced). When Redis cannot be reached for that either, the
// client is answered 503 "outcome unknown", and the reserve may still run
// or have run (a paused Redis runs the script once it resumes): the release
// is then retried here, in the background, until Redis answers. The
// release script is safe whenever it lands: it gives back nothing a worker
// has claimed or a retry was shown (CLAIMED, SHOWN: those stay orders), and
// remembers the orderNo as released, so a reserve still on its way takes
// nothing. So what such a 503 reserved is given back as soon as Redis is
// back, not published by the redrive REDRIVE_AFTER later as an order its
// client, told 503, may never learn of. Two cases still end as orders, which
// the client's retry with the same requestId replays: a produce that timed
// out at the gateway but reached the broker, whose event a worker claims
// before this release lands (CLAIMED), and a gateway that stops first (the
// redrive publishes the reservation).
const (
	releaseLaterQueue = 10000            // reservations waiting; beyond, the redrive's
	releaseLaterFor   = 10 * time.Minute // how long one is retried
)

type releasesLater struct {
	mu      sync.Mutex
	queue   []laterRelease
	full    bool // the queue was found full since it last had room
	running atomic.Bool
}

type laterRelease struct {
	rel   stock.Release
	until time.Time
}

// releaseLater queues rel for the background release; a runner goroutine
// lives while the queue is not empty.
func (s *Server) releaseLater(rel stock.Release) {
	l := &s.later
	l.mu.Lock()
	if len(l.queue) >= releaseLaterQueue {
		// Logged once per filling, not once per request of an outage.
		first := !l.full
		l.full = true
		l.mu.Unlock()
		if first {
			s.deps.Log.Warn("release queue full: further reservations whose release failed are left to the redrive",
				"request_id", rel.RequestID, "order_no", rel.OrderNo, "queue", releaseLaterQueue)
		}
		return
	}
	l.full = false
	l.queue = append(l.queue, laterRelease{rel: rel, until: time.Now().Add(releaseLaterFor)})
	l.mu.Unlock()
	if l.running.CompareAndSwap(false, true) {
		go s.runReleasesLater()
	}
}

func (s *Server) runReleasesLater() {
	l := &s.later
	backoff := 100 * time.Millisecond
	for {
		l.mu.Lock()
		if len(l.queue) == 0 {
			l.running.Store(false)
			l.mu.Unlock()
			return
		}
		next := l.queue[0]
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReserveTimeout)
		out, err := s.deps.Stock.Release(ctx, stock.Unproduced, next.rel)
		cancel()
		attrs := []any{"request_id", next.rel.RequestID, "order_no", next.rel.OrderNo}
		switch {
		case err == nil:
			s.deps.Log.Info("released a reservation whose first release failed", append(attrs, "release", out)...)
		case time.Now().After(next.until):
			s.deps.Log.Warn("gave up releasing a reservation: left to the redrive", append(attrs, "err", err)...)
		default:
			time.Sleep(backoff)
			// Soon after Redis is back: a worker that claims the reservation
			// first (its event reached the broker after all) makes it an order.
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		l.mu.Lock()
		l.queue = l.queue[1:]
		l.mu.Unlock()
	}
}
