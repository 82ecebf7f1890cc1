package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gwclient "orderpipe/gateway/client"
)

// The storefront load (the nemesis's): clients as a storefront backend
// behaves, not as a patient test. Each call has a client-side timeout, some
// shorter than the gateways' PRODUCE_TIMEOUT, so the client stops waiting
// for a request whose produce is still in flight. After a timeout, a
// transport error, a 429 or a 5xx it retries with the same requestId — on
// any gateway, after Retry-After or a backoff — or gives up, or comes back
// much later. It pays some accepted orders, cancels some (racing the
// payments and the closer), polls some, and replays some accepted requests
// later on. Every call is recorded in the history, with its call and
// return times, for the checker and the linearizability check (linz.go).

// storefrontConfig shapes the load.
type storefrontConfig struct {
	URLs       []string // the gateways
	ActivityID int64
	Items      []int64
	Users      int
	Clients    int
	Think      time.Duration
	// Stop ends the load: no new request once closed; retries, payments
	// and polls in hand go on for up to RetryFor after it.
	Stop     <-chan struct{}
	RetryFor time.Duration
	Seed     uint64
	// Timeouts are the client timeouts a request picks from.
	Timeouts []time.Duration
	// Shares of the accepted orders paid, cancelled, polled and replayed
	// later, and of the unanswered calls given up and retried much later
	// (2–6 s).
	PayShare, CancelShare, PollShare, ReplayShare float64
	GiveUpShare, LaterShare                       float64
}

type storefront struct {
	cfg     storefrontConfig
	hist    *history
	apis    []*gwclient.Client // one per gateway, over one HTTP client
	stopped chan struct{}      // closed RetryFor after Stop
	wg      sync.WaitGroup
}

// runStorefront sends load until cfg.Stop is closed, then waits for what
// the clients still have in hand (bounded by RetryFor).
func runStorefront(ctx context.Context, cfg storefrontConfig, h *history) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	sf := &storefront{cfg: cfg, hist: h, stopped: make(chan struct{})}
	for _, u := range cfg.URLs {
		api := gwclient.New(u)
		api.HTTPClient = hc
		sf.apis = append(sf.apis, api)
	}
	go func() {
		<-cfg.Stop
		time.Sleep(cfg.RetryFor)
		close(sf.stopped)
	}()
	for c := range cfg.Clients {
		sf.wg.Add(1)
		go func() {
			defer sf.wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(c)))
			for n := 0; !closed(cfg.Stop) && ctx.Err() == nil; n++ {
				time.Sleep(time.Duration(rng.Int64N(2*int64(cfg.Think) + 1)))
				b := orderBody{RequestID: fmt.Sprintf("n%d-a%d-%d-%d", cfg.Seed%100000, cfg.ActivityID, c, n),
					UserID: 1 + rng.Int64N(int64(cfg.Users)), ActivityID: cfg.ActivityID,
					ItemID: cfg.Items[rng.IntN(len(cfg.Items))], Quantity: 1 + rng.IntN(2)}
				sf.order(ctx, c, b, rng, &attempts{})
			}
		}()
	}
	sf.wg.Wait()
}

// attempts numbers a requestId's POSTs across the goroutines that send
// it (its retries, a later retry, replays).
type attempts struct{ n atomic.Int32 }

// order sends b until it is answered for good, given up, or handed to a
// later retry.
func (sf *storefront) order(ctx context.Context, c int, b orderBody, rng *rand.Rand, at *attempts) {
	timeout := sf.cfg.Timeouts[rng.IntN(len(sf.cfg.Timeouts))]
	backoff := 50 * time.Millisecond
	for {
		n := int(at.n.Add(1))
		gw := rng.IntN(len(sf.cfg.URLs))
		o := sf.call(ctx, c, gw, opOrder, &b, "", timeout)
		o.RequestID, o.Attempt, o.Payload = b.RequestID, n, &b
		switch {
		case o.ok2xx():
			sf.hist.add(o)
			sf.accepted(ctx, c, b, o.OrderNo, rng, at)
			return
		case !o.retriable():
			sf.hist.add(o)
			return
		}
		sf.hist.add(o)
		if closed(sf.stopped) || ctx.Err() != nil {
			sf.hist.add(Op{Client: c, Kind: opGiveUp, RequestID: b.RequestID, Start: time.Now(), End: time.Now(), Note: "load over"})
			return
		}
		switch r := rng.Float64(); {
		case r < sf.cfg.GiveUpShare:
			sf.hist.add(Op{Client: c, Kind: opGiveUp, RequestID: b.RequestID, Start: time.Now(), End: time.Now()})
			return
		case r < sf.cfg.GiveUpShare+sf.cfg.LaterShare:
			// The shopper comes back much later; the client moves on.
			sf.after(2*time.Second+time.Duration(rng.Int64N(int64(4*time.Second))), rng, func(rng *rand.Rand) {
				sf.order(ctx, c, b, rng, at)
			})
			return
		}
		backoff = waitToRetry(o, backoff)
	}
}

// accepted follows an order the client was told about: pays it, polls it,
// replays its request later — each in the background.
func (sf *storefront) accepted(ctx context.Context, c int, b orderBody, orderNo string, rng *rand.Rand, at *attempts) {
	if rng.Float64() < sf.cfg.PayShare {
		// Up to 3 s: CLOSE_AFTER is 2 s, so some payments race the closer.
		sf.after(time.Duration(rng.Int64N(int64(3*time.Second))), rng, func(rng *rand.Rand) {
			sf.followUp(ctx, c, b, opPay, orderNo, rng)
		})
	}
	if rng.Float64() < sf.cfg.PollShare {
		sf.after(time.Duration(rng.Int64N(int64(4*time.Second))), rng, func(rng *rand.Rand) {
			sf.followUp(ctx, c, b, opGet, orderNo, rng)
		})
	}
	if sf.cfg.CancelShare > 0 && rng.Float64() < sf.cfg.CancelShare {
		// Within the payments' 3 s: some cancels race a payment, some
		// the closer.
		sf.after(time.Duration(rng.Int64N(int64(3*time.Second))), rng, func(rng *rand.Rand) {
			sf.followUp(ctx, c, b, opCancel, orderNo, rng)
		})
	}
	if rng.Float64() < sf.cfg.ReplayShare {
		sf.after(time.Duration(rng.Int64N(int64(5*time.Second))), rng, func(rng *rand.Rand) {
			sf.order(ctx, c, b, rng, at)
		})
	}
}

// after runs fn in the background after delay, with a generator of its own
// seeded from rng, which the caller goes on drawing from.
func (sf *storefront) after(delay time.Duration, rng *rand.Rand, fn func(rng *rand.Rand)) {
	frng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	sf.wg.Add(1)
	go func() {
		defer sf.wg.Done()
		time.Sleep(delay)
		fn(frng)
	}()
}

// waitToRetry sleeps before the next attempt, for the answer's Retry-After
// or else backoff, and returns the next backoff (doubled, 1 s at most).
func waitToRetry(o Op, backoff time.Duration) time.Duration {
	wait := backoff
	if o.RetryAfter > 0 {
		wait = time.Duration(o.RetryAfter) * time.Second
	}
	time.Sleep(wait)
	return min(2*backoff, time.Second)
}

// followUp is a pay, a cancel or a poll of b's order, retried like an order.
func (sf *storefront) followUp(ctx context.Context, c int, b orderBody, kind, orderNo string, rng *rand.Rand) {
	timeout := sf.cfg.Timeouts[rng.IntN(len(sf.cfg.Timeouts))]
	backoff := 100 * time.Millisecond
	for {
		o := sf.call(ctx, c, rng.IntN(len(sf.cfg.URLs)), kind, &b, orderNo, timeout)
		o.RequestID, o.OrderNo = b.RequestID, orderNo
		sf.hist.add(o)
		if !o.retriable() || closed(sf.stopped) || ctx.Err() != nil || rng.Float64() < sf.cfg.GiveUpShare {
			return
		}
		backoff = waitToRetry(o, backoff)
	}
}

// call is one call of the gateway client to gateway gw with the client's
// timeout: the order b, or a payment, cancel (by b's user) or poll of orderNo.
func (sf *storefront) call(ctx context.Context, c, gw int, kind string, b *orderBody, orderNo string, timeout time.Duration) Op {
	o := Op{Client: c, Kind: kind, Gateway: gw, TimeoutMs: timeout.Milliseconds(), Start: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	api := sf.apis[gw]
	var err error
	switch kind {
	case opOrder:
		var p gwclient.Placed
		p, err = api.PlaceOrder(cctx, *b)
		o.Status, o.OrderNo, o.OrderStatus, o.Replayed = p.HTTPStatus, p.OrderNo, p.Status, p.Replayed
	case opPay:
		var p gwclient.Paid
		p, err = api.Pay(cctx, orderNo)
		o.OrderStatus = p.Status
	case opGet:
		var g gwclient.Order
		g, err = api.GetOrder(cctx, orderNo)
		o.OrderStatus, o.Reason = g.Status, g.Reason
	case opCancel:
		var x gwclient.Cancelled
		x, err = api.Cancel(cctx, orderNo, b.UserID)
		o.OrderStatus, o.Reason = x.Status, x.Reason
	}
	o.End = time.Now()
	var e *gwclient.Error
	switch {
	case err == nil:
		if o.Status == 0 {
			o.Status = http.StatusOK
		}
	case errors.As(err, &e):
		o.Status, o.RetryAfter = e.Status, int(e.RetryAfter/time.Second)
		if e.Code != gwclient.CodeUndecodable {
			o.Code = string(e.Code)
		}
		o.Unknown = e.Status >= 500 && (e.Status != http.StatusServiceUnavailable || e.Code == gwclient.CodeUndecodable ||
			strings.Contains(e.Message, "outcome is unknown"))
	default:
		// No answer, or cut mid-answer: as good as no answer.
		o.Err = callError(err)
	}
	return o
}

func callError(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "client timeout"
	}
	return err.Error()
}
