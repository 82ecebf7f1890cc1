package stock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/stock/internal/layout"
)

// A sold-out flood: nearly every request is refused, and each refusal used
// to run the whole reserve script. A Reserver keeps, per bucket, a verdict:
// Redis's last refusal of new requests (sold out, or outside the sale
// window), and refuses a new requestId from it without the script. It is a
// filter, never the final word:
//
//   - Only refusals are kept, never "on sale": a request the verdict does
//     not refuse runs the script, so the kill switch (end.lua) stops every
//     sale that is still selling within one reserve round trip.
//   - A verdict lives VerdictTTL at most, counted from before the script
//     that made it was sent: a unit given back at instant g (release,
//     restore, reconciler fix, a preheat with more stock) is seen by every
//     script sent after g, so every gateway sells it again by g + TTL, and
//     nothing has to reach the gateways for that: no message that could
//     be lost. A NOT_ON_SALE verdict of a sale that has not started lives
//     no longer than the time the script said was left before the start,
//     measured on this process's monotonic clock from before the send, so
//     it never outlives the start whatever the clocks say.
//   - A requestId Redis knows (its dedup record exists: the reserve script
//     reserved for it, or the reconciler restored it) is never answered from
//     the verdict: its retry must get its first answer, a replay or a 422.
//     The refusals record nothing, so only the dedup record can tell, and it
//     may have been written by another gateway a moment ago; so a refusal
//     from the verdict first asks Redis whether the record exists. The
//     asks of concurrent refusals of one bucket go out as one EXISTS with
//     all their keys (one hash slot: one command on a cluster too), a few
//     hundred nanoseconds of Redis's time each instead of a script run.
//     Only when none of them is known are they all refused; otherwise each
//     runs the script.
//   - Before a verdict expires one request runs the script anyway, so a
//     flood renews its verdict with one script per bucket and gateway, not
//     a burst of them at each expiry.

// MaxVerdictTTL bounds VerdictTTL: the contract's bound on a unit given back
// being on sale again on every gateway.
const MaxVerdictTTL = time.Second

// verdict is Redis's last refusal of a bucket's new requests.
type verdict struct {
	outcome Outcome // SoldOut or NotOnSale
	// remaining is the stock Redis reported with SOLD_OUT: a quantity
	// within it is not refused.
	remaining int64
	until     time.Time // monotonic; refused only before it
	renewAt   time.Time // from then on, one request asks the script again
	renewing  atomic.Bool
	keys      layout.Keys // the bucket's
}

// verdictFor is the verdict that refuses quantity q in it now, if any;
// renew says the caller was picked to run the script instead.
func (r *Reserver) verdictFor(it Item, q int, now time.Time) (v *verdict, renew bool) {
	x, ok := r.verdicts.Load(it)
	if !ok {
		return nil, false
	}
	v = x.(*verdict)
	if !now.Before(v.until) || v.outcome == SoldOut && int64(q) <= v.remaining {
		return nil, false
	}
	if !now.Before(v.renewAt) && v.renewing.CompareAndSwap(false, true) {
		return v, true
	}
	return v, false
}

// learn keeps what the script answered for it, sent at sentAt, as the
// bucket's verdict: a refusal of new requests replaces it, an answer that
// saw stock drops it, anything else leaves it.
func (r *Reserver) learn(it Item, res ReserveResult, sentAt time.Time) {
	life := r.ttl
	switch {
	case res.Outcome == SoldOut, res.Outcome == Reserved && res.Remaining <= 0:
	case res.Outcome == NotOnSale && res.OutsideWindow:
		if res.OpensIn > 0 {
			life = min(life, res.OpensIn)
		}
	case res.Outcome == Reserved, res.Outcome == AlreadyPurchased:
		r.verdicts.Delete(it)
		return
	default:
		return
	}
	outcome := res.Outcome
	if outcome == Reserved {
		outcome = SoldOut
	}
	r.verdicts.Store(it, &verdict{outcome: outcome, remaining: max(res.Remaining, 0), until: sentAt.Add(life),
		renewAt: sentAt.Add(life * 3 / 4), keys: r.store.keys(it)})
}

// Forget drops the verdicts of an activity's items: a preheat made through
// this gateway is seen by its next request, not a VERDICT_TTL later (the
// other gateways still take up to that).
func (r *Reserver) Forget(activityID int64) {
	r.verdicts.Range(func(k, _ any) bool {
		if k.(Item).ActivityID == activityID {
			r.verdicts.Delete(k)
		}
		return true
	})
}

// refuseFromVerdict answers o in it from the bucket's verdict, when there
// is one and Redis does not know the requestId; ok is false when the
// script has to decide.
func (r *Reserver) refuseFromVerdict(ctx context.Context, o Order, it Item) (a Attempt, ok bool, renew *verdict) {
	a, ok, renew, _ = r.verdictAnswer(ctx, o, it, nil)
	return a, ok, renew
}

// verdictAnswer is refuseFromVerdict with the check's failure, if any, its
// round trip run through guard (nil: none).
func (r *Reserver) verdictAnswer(ctx context.Context, o Order, it Item, guard func(func() error) error) (a Attempt, ok bool, renew *verdict, err error) {
	if r.ttl <= 0 || o.ReplayOnly {
		return Attempt{}, false, nil, nil
	}
	v, renewing := r.verdictFor(it, o.Quantity, r.now())
	if v == nil || renewing {
		if renewing {
			return Attempt{}, false, v, nil
		}
		return Attempt{}, false, nil, nil
	}
	var known, ended bool
	ask := func() error {
		var err error
		known, ended, err = r.known.ask(ctx, v.keys.Req(o.RequestID), v.keys.Sale, it)
		return err
	}
	if guard == nil {
		err = ask()
	} else {
		err = guard(ask)
	}
	if err != nil || known {
		return Attempt{}, false, nil, err
	}
	res := ReserveResult{Outcome: v.outcome, Remaining: v.remaining, OutsideWindow: v.outcome == NotOnSale}
	if ended {
		// The kill switch ended the sale since the verdict was taken: from
		// then on every answer is NOT_ON_SALE (an ended sale stays ended).
		res = ReserveResult{Outcome: NotOnSale, OutsideWindow: true}
	}
	return Attempt{ReserveResult: res, Item: it, FromVerdict: true}, true, nil, nil
}

// knownAsks coalesces the dedup-record checks of concurrent refusals: the
// checks of one bucket that wait together become one EXISTS, and those of
// several buckets one pipeline. One pipeline is in flight at a time; the
// checks that arrive meanwhile go in the next, and wait on one channel.
type knownAsks struct {
	rdb     redis.UniversalClient
	mu      sync.Mutex
	queue   []*knownAsk
	done    chan struct{} // closed once the queue's pipeline has answered
	sending bool
	lastAt  time.Time // when the last pipeline went out
}

// knownGap is the least time between two pipelines of checks: under a
// flood the checks that arrive meanwhile share the next round trip, which
// is what Redis spends its time on (reading and writing the socket), not
// the keys; a lone check waits for nothing.
var knownGap = 300 * time.Microsecond

// knownAsk is one queued check.
type knownAsk struct {
	key, sale string
	group     Item
	known     bool
	ended     bool
	err       error
}

// ask says whether key (a dedup record of bucket it) exists — when several
// checks of it went out together, whether any of theirs does — and whether
// the kill switch has ended the bucket's sale (its sale hash's 'ended'
// tombstone, end.lua), in the same round trip. The pipeline is bounded by
// the Redis client's timeouts; ctx ends the wait sooner.
func (k *knownAsks) ask(ctx context.Context, key, sale string, it Item) (known, ended bool, err error) {
	c := &knownAsk{key: key, sale: sale, group: it}
	k.mu.Lock()
	if k.done == nil {
		k.done = make(chan struct{})
	}
	done := k.done
	k.queue = append(k.queue, c)
	if !k.sending {
		k.sending = true
		go k.send()
	}
	k.mu.Unlock()
	if ctx.Done() == nil { // a context that never ends: a plain wait
		<-done
		return c.known, c.ended, c.err
	}
	select {
	case <-done:
		return c.known, c.ended, c.err
	case <-ctx.Done():
		// The check is read only: abandoning it changes nothing.
		return false, false, fmt.Errorf("checking the requestId: %w", context.Cause(ctx))
	}
}

// send sends pipelines while checks are queued, then exits.
func (k *knownAsks) send() {
	for {
		k.mu.Lock()
		if len(k.queue) == 0 {
			k.sending = false
			k.mu.Unlock()
			return
		}
		wait := knownGap - time.Since(k.lastAt)
		if wait > 0 {
			// The checks that arrive meanwhile join this pipeline.
			k.mu.Unlock()
			time.Sleep(wait)
			k.mu.Lock()
		}
		batch, done := k.queue, k.done
		k.queue, k.done = nil, nil
		k.mu.Unlock()
		k.lastAt = time.Now()
		k.exec(batch)
		close(done)
	}
}

// exec sends one EXISTS and one HEXISTS of the sale's tombstone per bucket
// of batch, in one pipeline bounded by the client's timeouts, and sets
// each check's answer.
func (k *knownAsks) exec(batch []*knownAsk) {
	groups := map[Item][]*knownAsk{}
	for _, c := range batch {
		groups[c.group] = append(groups[c.group], c)
	}
	cmds := make(map[Item]*redis.IntCmd, len(groups))
	endedCmds := make(map[Item]*redis.BoolCmd, len(groups))
	_, err := k.rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for it, cs := range groups {
			keys := make([]string, len(cs))
			for i, c := range cs {
				keys[i] = c.key
			}
			cmds[it] = p.Exists(context.Background(), keys...)
			endedCmds[it] = p.HExists(context.Background(), cs[0].sale, "ended")
		}
		return nil
	})
	for it, cs := range groups {
		n, cerr := cmds[it].Result()
		ended, eerr := endedCmds[it].Result()
		if cerr == nil {
			cerr = eerr
		}
		if cerr == nil && err != nil && n == 0 && !ended {
			cerr = err
		}
		for _, c := range cs {
			c.known, c.ended, c.err = n > 0, ended, cerr
		}
	}
}
