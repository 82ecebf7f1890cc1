package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"orderpipe/pkg/stock"
)

// The leader's polls back off from replayPollMin to replayPollMax: a first
// attempt held up by a slow broker is likely to stay held up a while.
const (
	replayPollMin = 20 * time.Millisecond
	replayPollMax = 200 * time.Millisecond
)

// replayWaits lets the retries of one request that arrive on this gateway
// while its first attempt is in progress share one wait. One of them, the
// leader, re-runs the reserve script with backoff; the others wait for its
// answer. Without it every retry polled on its own, so a retry storm during
// a broker slowdown cost Redis a script per retry every 50 ms for
// REPLAY_WAIT (about 40 each). When the first attempt runs on this gateway,
// its end wakes the leader at once; polling remains for a first attempt on
// another gateway.
//
// An entry lives while its leader polls and is removed when the leader
// stops, whoever still waits on it: the map holds at most one entry per
// request being waited for, each a few words.
type replayWaits struct {
	// active is len(m), read without the lock so that the hot path's
	// settled costs one atomic load when nobody waits.
	active atomic.Int64
	mu     sync.Mutex
	m      map[string]*replayWait
}

// replayWait is one shared wait.
type replayWait struct {
	// wake is signalled (buffered, never blocking) when this gateway's own
	// first attempt of the request has settled.
	wake chan struct{}
	// done is closed when the leader stops polling; res and err, its last
	// answer, are set before.
	done    chan struct{}
	res     stock.ReserveResult
	err     error
	orderNo string // the leader's own orderNo
}

// replayKey names a request: a reused requestId with another payload is
// another request (and is answered at once, never in progress).
func replayKey(requestID, fingerprint string) string { return requestID + "\x00" + fingerprint }

// join returns the request's shared wait, and whether the caller created it
// and so leads it.
func (r *replayWaits) join(key, orderNo string) (*replayWait, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.m[key]; w != nil {
		return w, false
	}
	if r.m == nil {
		r.m = map[string]*replayWait{}
	}
	w := &replayWait{wake: make(chan struct{}, 1), done: make(chan struct{}), orderNo: orderNo}
	r.m[key] = w
	r.active.Add(1)
	return w, true
}

// leave ends a leader's wait with its last answer, so the next retry to
// arrive starts a new one.
func (r *replayWaits) leave(key string, w *replayWait, res stock.ReserveResult, err error) {
	r.mu.Lock()
	delete(r.m, key)
	r.active.Add(-1)
	r.mu.Unlock()
	w.res, w.err = res, err
	close(w.done)
}

// settled tells the request's leader, if any, that this gateway's first
// attempt of it has settled (its event acked and marked, or given back).
func (r *replayWaits) settled(requestID, fingerprint string) {
	if r.active.Load() == 0 {
		return
	}
	r.mu.Lock()
	w := r.m[replayKey(requestID, fingerprint)]
	r.mu.Unlock()
	if w != nil {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// awaitReplay is a retry's wait for its first attempt, which the reserve
// script has just answered in progress: it returns the first answer that is
// not, or in progress once the deadline has passed or the client has gone.
// Every answer comes from the same atomic reserve, so a released first
// attempt lets a retry reserve afresh. Only a replay is taken from the
// leader as is (the same orderNo, durable, whoever asked); any other answer
// of the leader's concerns its own attempt, so a follower asks once itself.
func (s *Server) awaitReplay(ctx context.Context, key, orderNo string, deadline time.Time,
	reserve func() (stock.ReserveResult, error)) (stock.ReserveResult, error) {
	res, err := stock.ReserveResult{Outcome: stock.InProgress}, error(nil)
	for err == nil && res.Outcome == stock.InProgress && time.Now().Before(deadline) && ctx.Err() == nil {
		w, leader := s.replays.join(key, orderNo)
		if leader {
			res, err = s.leadReplay(ctx, key, w, deadline, reserve)
			continue
		}
		if !waitDone(ctx, w.done, deadline) {
			continue
		}
		switch {
		case w.err == nil && w.res.Outcome == stock.Replayed && w.res.OrderNo != w.orderNo:
			res = w.res
		case w.err == nil && w.res.Outcome == stock.InProgress:
			// The leader gave up (its client left, its deadline passed):
			// one of those still waiting takes over.
		default:
			res, err = reserve()
		}
	}
	return res, err
}

// leadReplay polls the reserve script with backoff, woken early by this
// gateway's own first attempt settling, until the answer is no longer in
// progress, the deadline has passed (one last poll at it) or the client
// has gone.
func (s *Server) leadReplay(ctx context.Context, key string, w *replayWait, deadline time.Time,
	reserve func() (stock.ReserveResult, error)) (res stock.ReserveResult, err error) {
	res.Outcome = stock.InProgress
	defer func() { s.replays.leave(key, w, res, err) }()
	for delay := replayPollMin; ; delay = min(2*delay, replayPollMax) {
		wait := min(delay, time.Until(deadline))
		if wait <= 0 {
			return res, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, nil
		case <-w.wake:
		case <-t.C:
		}
		t.Stop()
		if res, err = reserve(); err != nil || res.Outcome != stock.InProgress {
			return res, err
		}
	}
}

// waitDone waits for done, and reports false if the client went or the
// deadline passed first.
func waitDone(ctx context.Context, done <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	case <-t.C:
		return false
	}
}
