package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The storefront load (the nemesis's): clients as a storefront backend
// behaves, not as a patient test. Each call has a client-side timeout, some
// shorter than the gateways' PRODUCE_TIMEOUT, so the client stops waiting
// for a request whose produce is still in flight. After a timeout, a
// transport error, a 429 or a 5xx it retries with the same requestId — on
// any gateway, after Retry-After or a backoff — or gives up, or comes back
// much later. It pays some accepted orders, polls some, and replays some
// accepted requests later on. Every call is recorded in the history.

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
	// Shares of the accepted orders paid, polled and replayed later, and
	// of the unanswered calls given up and retried much later (2–6 s).
	PayShare, PollShare, ReplayShare float64
	GiveUpShare, LaterShare          float64
}

type storefront struct {
	cfg     storefrontConfig
	hist    *history
	client  *http.Client
	stopped chan struct{} // closed RetryFor after Stop
	wg      sync.WaitGroup
}

// runStorefront sends load until cfg.Stop is closed, then waits for what
// the clients still have in hand (bounded by RetryFor).
func runStorefront(ctx context.Context, cfg storefrontConfig, h *history) {
	sf := &storefront{cfg: cfg, hist: h, stopped: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}}
	defer sf.client.CloseIdleConnections()
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
	raw, _ := json.Marshal(b)
	timeout := sf.cfg.Timeouts[rng.IntN(len(sf.cfg.Timeouts))]
	backoff := 50 * time.Millisecond
	for {
		n := int(at.n.Add(1))
		gw := rng.IntN(len(sf.cfg.URLs))
		o := sf.call(ctx, c, gw, opOrder, http.MethodPost, "/v1/orders", raw, timeout)
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
			later := 2*time.Second + time.Duration(rng.Int64N(int64(4*time.Second)))
			lrng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
			sf.wg.Add(1)
			go func() {
				defer sf.wg.Done()
				time.Sleep(later)
				sf.order(ctx, c, b, lrng, at)
			}()
			return
		}
		wait := backoff
		if o.RetryAfter > 0 {
			wait = time.Duration(o.RetryAfter) * time.Second
		}
		backoff = min(2*backoff, time.Second)
		time.Sleep(wait)
	}
}

// accepted follows an order the client was told about: pays it, polls it,
// replays its request later — each in the background.
func (sf *storefront) accepted(ctx context.Context, c int, b orderBody, orderNo string, rng *rand.Rand, at *attempts) {
	follow := func(delay time.Duration, fn func(rng *rand.Rand)) {
		frng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		sf.wg.Add(1)
		go func() {
			defer sf.wg.Done()
			time.Sleep(delay)
			fn(frng)
		}()
	}
	if rng.Float64() < sf.cfg.PayShare {
		// Up to 3 s: CLOSE_AFTER is 2 s, so some payments race the closer.
		follow(time.Duration(rng.Int64N(int64(3*time.Second))), func(rng *rand.Rand) {
			sf.followUp(ctx, c, b.RequestID, opPay, http.MethodPost, "/v1/orders/"+orderNo+"/pay", orderNo, rng)
		})
	}
	if rng.Float64() < sf.cfg.PollShare {
		follow(time.Duration(rng.Int64N(int64(4*time.Second))), func(rng *rand.Rand) {
			sf.followUp(ctx, c, b.RequestID, opGet, http.MethodGet, "/v1/orders/"+orderNo, orderNo, rng)
		})
	}
	if rng.Float64() < sf.cfg.ReplayShare {
		follow(time.Duration(rng.Int64N(int64(5*time.Second))), func(rng *rand.Rand) {
			sf.order(ctx, c, b, rng, at)
		})
	}
}

// followUp is a pay or a poll, retried like an order.
func (sf *storefront) followUp(ctx context.Context, c int, rid, kind, method, path, orderNo string, rng *rand.Rand) {
	timeout := sf.cfg.Timeouts[rng.IntN(len(sf.cfg.Timeouts))]
	backoff := 100 * time.Millisecond
	for {
		o := sf.call(ctx, c, rng.IntN(len(sf.cfg.URLs)), kind, method, path, nil, timeout)
		o.RequestID, o.OrderNo = rid, orderNo
		sf.hist.add(o)
		if !o.retriable() || closed(sf.stopped) || ctx.Err() != nil || rng.Float64() < sf.cfg.GiveUpShare {
			return
		}
		wait := backoff
		if o.RetryAfter > 0 {
			wait = time.Duration(o.RetryAfter) * time.Second
		}
		backoff = min(2*backoff, time.Second)
		time.Sleep(wait)
	}
}

// call is one HTTP call to gateway gw with the client's timeout.
func (sf *storefront) call(ctx context.Context, c, gw int, kind, method, path string, body []byte, timeout time.Duration) Op {
	o := Op{Client: c, Kind: kind, Gateway: gw, TimeoutMs: timeout.Milliseconds(), Start: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, method, sf.cfg.URLs[gw]+path, bytes.NewReader(body))
	if err != nil {
		o.Err, o.End = err.Error(), time.Now()
		return o
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := sf.client.Do(req)
	if err != nil {
		o.Err = callError(err)
		o.End = time.Now()
		return o
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	o.End = time.Now()
	if err != nil {
		// Cut mid-answer: as good as no answer.
		o.Err = callError(err)
		return o
	}
	o.Status = res.StatusCode
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil {
		o.RetryAfter = s
	}
	var a struct {
		OrderNo  string `json:"orderNo"`
		Status   string `json:"status"`
		Replayed bool   `json:"replayed"`
		Error    struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &a) == nil {
		o.OrderNo, o.OrderStatus, o.Replayed, o.Code = a.OrderNo, a.Status, a.Replayed, a.Error.Code
	}
	return o
}

func callError(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "client timeout"
	}
	return err.Error()
}
