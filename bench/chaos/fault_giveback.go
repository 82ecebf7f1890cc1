package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gwclient "orderpipe/gateway/client"
	"orderpipe/pkg/stock"
)

// The flood-giveback fault: a flood of fresh buyers on a fresh sale of a
// few units, from before it opens until after it sold out, while units are
// given back one at a time (a buyer's cancel, or more stock through a PUT
// and the reconciler's fix), each time with the flood on one gateway only,
// so every gateway is judged on its own; the closer's closes give units
// back too (CLOSE_AFTER is short here). The gateways refuse most of such a
// flood from their verdicts (pkg/stock/verdict.go) without running the
// reserve script; the rules it judges (docs/stores.md, "The sold-out
// flood: verdicts") are that a verdict filters and never decides:
//
//   - once the sale has opened, no request sent MaxVerdictTTL + slack after
//     the start is answered NOT_ON_SALE;
//   - while Redis holds stock of the sale, no request sent MaxVerdictTTL +
//     slack after the stock came is answered SOLD_OUT unless something may
//     have taken it first. Redis's stock is sampled every few milliseconds
//     through the gateways' own link; a stretch of samples all above zero
//     is stock Redis held throughout, and a SOLD_OUT answered inside such a
//     stretch, to a request sent over the bound after it began, before any
//     request that may have taken a unit was sent (a 202, a 5xx, no answer;
//     anything but a refusal), is stale. However the unit came back (a
//     cancel, a close, the reconciler, a rejection's compensation), and
//     whatever the store did meanwhile (a failed or slow read ends the
//     stretch);
//   - a retry of an accepted requestId is answered its first orderNo (200)
//     on every gateway while the item is sold out, never refused;
//   - every 202 resolves through GET to an order or a REJECTED record, and
//     more live orders (UNPAID, PAID) than units ever on sale is an
//     oversell. (More 202s than units is not: a Redis failover may lose
//     reservations, and Postgres rejects what it cannot sell.)
//
// The reconciler's check after the run holds the fresh sale to I5 like the
// run's own items.

// givebackFaults: one per seed's load, from a stream of its own (so the
// other streams are unchanged), early enough that its phases fit in the
// load.
func givebackFaults(seed uint64, loadFor time.Duration) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x676976656261636b))
	return []fault{{Kind: "flood-giveback", Target: "flood", At: between(rng, loadFor/10, loadFor*3/10),
		For: between(rng, 700*time.Millisecond, 1500*time.Millisecond)}}
}

// givebackSlack is what the bound allows beyond MaxVerdictTTL: a loaded
// two-core machine's answer time.
const givebackSlack = 500 * time.Millisecond

// givebackTally adds up the stretches of stock under a flood over a run's
// seeds.
type givebackTally struct {
	mu        sync.Mutex
	floods    int
	stretches int
	longest   time.Duration
}

var givebackStats givebackTally

func (g *givebackTally) record(stretches int, longest time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.floods++
	g.stretches += stretches
	g.longest = max(g.longest, longest)
}

// givebackSummary is the run's line on the floods.
func givebackSummary() string {
	g := &givebackStats
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprintf("flood-giveback: %d floods; Redis held stock under them in %d stretches, the longest once on sale %s (a verdict may refuse for %s at most; a store fault may hold the gateways off longer)",
		g.floods, g.stretches, g.longest.Round(time.Millisecond), stock.MaxVerdictTTL)
}

// givebackSales numbers the fresh activities within a run.
var givebackSales atomic.Int64

// floodAnswer is one request of the flood.
type floodAnswer struct {
	gateway    int
	requestID  string
	sent, recv time.Time
	status     int    // 0: no answer (transport error, timeout)
	code       string // the refusal's code
	orderNo    string
}

// refused: the request was answered a refusal that took nothing.
func (a floodAnswer) refused() bool {
	return a.status >= 400 && a.status < 500 || a.code == "CONNECTION_REFUSED"
}

// flood is the fault's buyers: each client places orders as fresh users
// back to back on the gateways it is told, and records every answer.
type flood struct {
	s       *Suite
	it      stock.Item
	next    atomic.Int64
	targets atomic.Pointer[[]int] // the gateways the clients send to
	mu      sync.Mutex
	answers []floodAnswer
	api     []*gwclient.Client
	// cancelled are the orders given up already: a cancel answers 200
	// again, but only the first gives a unit back.
	cancelled map[string]bool
	samples   []stockSample
}

// stockSample is one read of the sale's stock in Redis, made between
// before and after; n < 0: the read failed.
type stockSample struct {
	before, after time.Time
	n             int64
}

// sample reads the sale's stock in Redis every few milliseconds until ctx
// ends.
func (f *flood) sample(ctx context.Context) {
	for ctx.Err() == nil {
		b := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		v, err := f.s.stock.BucketStocks(rctx, f.it, 1)
		cancel()
		n := int64(-1)
		if err == nil && v[0] != nil {
			n = *v[0]
		}
		f.mu.Lock()
		f.samples = append(f.samples, stockSample{before: b, after: time.Now(), n: n})
		f.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
}

// stretch is a time Redis held stock of the sale throughout.
type stretch struct{ from, to time.Time }

// stretches are the runs of samples above zero, each read begun within gap
// of the end of the one before: from the end of the first read to the
// start of the last.
func (f *flood) stretches(gap time.Duration) []stretch {
	f.mu.Lock()
	samples := slices.Clone(f.samples)
	f.mu.Unlock()
	var out []stretch
	var cur *stretch
	var prev stockSample
	for _, x := range samples {
		switch {
		case x.n > 0 && cur != nil && x.before.Sub(prev.after) <= gap:
			cur.to = x.before
		default:
			if cur != nil && cur.to.After(cur.from) {
				out = append(out, *cur)
			}
			cur = nil
			if x.n > 0 {
				cur = &stretch{from: x.after, to: x.after}
			}
		}
		prev = x
	}
	if cur != nil && cur.to.After(cur.from) {
		out = append(out, *cur)
	}
	return out
}

var floodHTTP = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

func (s *Suite) newFlood(it stock.Item) *flood {
	f := &flood{s: s, it: it, cancelled: map[string]bool{}}
	for _, u := range s.httpURLs {
		api := gwclient.New(u)
		api.HTTPClient = floodHTTP
		f.api = append(f.api, api)
	}
	f.aim(nil)
	return f
}

// aim sends the flood to gateways gws (nil: all of them).
func (f *flood) aim(gws []int) {
	if gws == nil {
		for i := range f.api {
			gws = append(gws, i)
		}
	}
	f.targets.Store(&gws)
}

// run floods with clients until ctx ends.
func (f *flood) run(ctx context.Context, clients int) {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				gws := *f.targets.Load()
				f.place(gws[c%len(gws)])
			}
		})
	}
	wg.Wait()
}

// place sends one order of a fresh user to gateway gw and records it.
func (f *flood) place(gw int) floodAnswer {
	n := f.next.Add(1)
	a := floodAnswer{gateway: gw, requestID: fmt.Sprintf("fg-%d-%d", f.it.ActivityID, n), sent: time.Now()}
	// Not bound to the fault's context: an answer in flight is recorded.
	p, err := f.api[gw].PlaceOrder(context.Background(), gwclient.OrderRequest{RequestID: a.requestID,
		UserID: n, ActivityID: f.it.ActivityID, ItemID: f.it.ItemID, Quantity: 1})
	a.recv = time.Now()
	var e *gwclient.Error
	switch {
	case err == nil:
		a.status, a.orderNo = p.HTTPStatus, p.OrderNo
	case errors.As(err, &e):
		a.status, a.code = e.Status, string(e.Code)
	case errors.Is(err, syscall.ECONNREFUSED):
		// The gateway is down (killed): nothing could be taken. Not
		// hammered in a tight loop while it restarts.
		a.status, a.code = http.StatusServiceUnavailable, "CONNECTION_REFUSED"
		time.Sleep(10 * time.Millisecond)
	}
	f.mu.Lock()
	f.answers = append(f.answers, a)
	f.mu.Unlock()
	return a
}

func (f *flood) snapshot() []floodAnswer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.answers)
}

// accepted are the flood's 202s so far.
func (f *flood) accepted() []floodAnswer {
	var out []floodAnswer
	for _, a := range f.snapshot() {
		if a.status == http.StatusAccepted {
			out = append(out, a)
		}
	}
	return out
}

// waitFor waits up to d for an answer that cond holds for, sent after from.
func (f *flood) waitFor(d time.Duration, from time.Time, cond func(floodAnswer) bool) (floodAnswer, bool) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, a := range f.snapshot() {
			if a.sent.After(from) && cond(a) {
				return a, true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return floodAnswer{}, false
}

// staleRefusals are the answers code to requests sent after from+bound and
// answered before any request that may have taken a unit was sent (every
// request answered after from that was not refused).
func staleRefusals(answers []floodAnswer, code string, from time.Time, bound time.Duration) []floodAnswer {
	var firstTaker time.Time
	for _, a := range answers {
		if a.recv.After(from) && !a.refused() && (firstTaker.IsZero() || a.sent.Before(firstTaker)) {
			firstTaker = a.sent
		}
	}
	var out []floodAnswer
	for _, a := range answers {
		if a.code == code && a.sent.After(from.Add(bound)) && (firstTaker.IsZero() || a.recv.Before(firstTaker)) {
			out = append(out, a)
		}
	}
	return out
}

// floodGiveback runs one flood-giveback fault on a fresh activity of the
// run's sale act: the sale, the flood from before it opens, a unit given
// back per gateway, then the judgement of every answer.
func (s *Suite) floodGiveback(ctx context.Context, f fault, act int64) (string, error) {
	id := act*1000 + 500 + givebackSales.Add(1)
	r := &floodRun{s: s, id: id, bound: stock.MaxVerdictTTL + givebackSlack, total: floodUnits,
		// It opens on a whole second at least 1.5 s from now, preheated before.
		opens: time.Now().Add(2500 * time.Millisecond).Truncate(time.Second)}
	desc := fmt.Sprintf("flood-giveback on sale %d (%d units, 1 bucket) at %s", id, floodUnits, s.since())
	if err := r.put(ctx); err != nil {
		return desc, err
	}
	if err := s.preheatUntilDone(ctx, id); err != nil {
		return desc, err
	}
	r.fl = s.newFlood(stock.Item{ActivityID: id, ItemID: 1})
	floodCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.fl.run(floodCtx, 8) }()
	sampled := make(chan struct{})
	go func() { defer close(sampled); r.fl.sample(floodCtx) }()
	defer func() { stop(); <-done; <-sampled }()

	r.open()
	// Each gateway in turn: every gateway holds the verdict (the flood on
	// all of them for a while), then the flood on that one only, and one
	// unit back.
	for _, gw := range rand.Perm(len(r.fl.api)) {
		r.giveBackThrough(ctx, gw, f.For)
	}
	stop()
	<-done
	<-sampled
	r.judgeStretches()
	r.settle(ctx)
	for _, m := range r.findings {
		preheatFinding("%s", m)
	}
	return fmt.Sprintf("%s: %s; answers %v; %d findings", desc, strings.Join(r.notes, "; "), r.fl.byCode(), len(r.findings)), nil
}

// floodUnits is the flood's sale's stock. One bucket even in a bucketed
// run: a unit given back is then every new buyer's to take (in a bucketed
// sale only its bucket's users'), which the rules above take for granted.
const floodUnits = 2

// floodRun is one flood-giveback fault as it goes.
type floodRun struct {
	s               *Suite
	fl              *flood
	id              int64
	opens           time.Time
	bound           time.Duration
	total           int64 // units ever on sale
	notes, findings []string
}

func (r *floodRun) finding(format string, args ...any) {
	r.findings = append(r.findings, fmt.Sprintf(format, args...))
}

// put creates the sale, or raises its stock to r.total, retried as an
// operator would: a gateway may be down.
func (r *floodRun) put(ctx context.Context) error {
	var last string
	for range 20 {
		code, errCode, err := coded(r.s.adminAPI().PutActivity(ctx, r.id, gwclient.ActivityUpsert{Name: fmt.Sprintf("flood %d", r.id),
			StartsAt: r.opens, EndsAt: r.opens.Add(time.Hour), PerUserLimit: 1,
			Items: []gwclient.ItemUpsert{{ItemID: 1, Stock: r.total, Buckets: 1}}}))
		if code == http.StatusOK {
			return nil
		}
		last = answerText(code, errCode, err)
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("PUT of the sale: %s", last)
}

// open waits for the sale to open and sell out under the flood (how soon
// is the faults' business) and judges the NOT_ON_SALE verdicts.
func (r *floodRun) open() {
	fl, opens, bound := r.fl, r.opens, r.bound
	first, sold := fl.waitFor(time.Until(opens)+bound+5*time.Second, opens, func(a floodAnswer) bool { return a.status == http.StatusAccepted })
	if sold {
		r.notes = append(r.notes, fmt.Sprintf("opened at %s, first sold %s later", r.s.sinceAt(opens), first.recv.Sub(opens).Round(time.Millisecond)))
	} else {
		r.notes = append(r.notes, fmt.Sprintf("opened at %s, nothing sold in %s", r.s.sinceAt(opens), bound+5*time.Second))
	}
	if _, ok := fl.waitFor(10*time.Second, opens, func(a floodAnswer) bool { return a.code == string(gwclient.CodeSoldOut) }); !ok {
		r.notes = append(r.notes, "not sold out within 10 s")
	}
	for _, a := range staleRefusals(fl.snapshot(), string(gwclient.CodeNotOnSale), opens, bound) {
		r.finding("flood-giveback: gateway %d answered %s NOT_ON_SALE, sent %s after sale %d opened",
			a.gateway+1, a.requestID, a.sent.Sub(opens).Round(time.Millisecond), r.id)
	}
}

// giveBackThrough floods every gateway for hold (each holds its sold-out
// verdict), retries the accepted requests through gateway gw, then floods
// gw alone and gives one unit back.
func (r *floodRun) giveBackThrough(ctx context.Context, gw int, hold time.Duration) {
	fl := r.fl
	fl.aim(nil)
	time.Sleep(hold)
	r.s.replaySoldOut(fl, gw, r.finding)
	fl.aim([]int{gw})
	time.Sleep(100 * time.Millisecond)
	how, back, err := r.s.giveBack(ctx, fl, func() error { return r.put(ctx) }, &r.total)
	if err != nil {
		r.notes = append(r.notes, fmt.Sprintf("gateway %d: no unit given back (%v)", gw+1, err))
		return
	}
	note := fmt.Sprintf("gateway %d: %s at %s", gw+1, how, r.s.sinceAt(back))
	if sold, ok := fl.waitFor(10*time.Second, back, func(a floodAnswer) bool { return a.status == http.StatusAccepted }); ok {
		note += fmt.Sprintf(", sold again %s later", sold.recv.Sub(back).Round(time.Millisecond))
	} else {
		note += ", not sold again within 10 s"
	}
	r.notes = append(r.notes, note)
}

// judgeStretches judges every SOLD_OUT against the stretches Redis held
// stock (the rules above).
func (r *floodRun) judgeStretches() {
	answers := r.fl.snapshot()
	stretches := r.fl.stretches(20 * time.Millisecond)
	var longest time.Duration
	for _, st := range stretches {
		if st.to.After(r.opens) {
			// The sale's stock before it opened is no stock on sale.
			longest = max(longest, st.to.Sub(later(st.from, r.opens)))
		}
		for _, a := range staleRefusals(answers, string(gwclient.CodeSoldOut), st.from, r.bound) {
			if a.recv.After(st.to) {
				continue
			}
			r.finding("flood-giveback: gateway %d answered %s SOLD_OUT, sent %s after Redis held stock of sale %d (all along until %s later) and before anything took it",
				a.gateway+1, a.requestID, a.sent.Sub(st.from).Round(time.Millisecond), r.id, st.to.Sub(a.recv).Round(time.Millisecond))
		}
	}
	givebackStats.record(len(stretches), longest)
	r.notes = append(r.notes, fmt.Sprintf("Redis held stock in %d stretches, the longest since the sale opened %s", len(stretches), longest.Round(time.Millisecond)))
}

// settle follows the accepted orders to their decision and judges the
// oversell.
func (r *floodRun) settle(ctx context.Context) {
	accepted := r.fl.accepted()
	live, settled := r.s.settleFlood(ctx, accepted, r.finding)
	if int64(live) > r.total {
		r.finding("flood-giveback: sale %d holds %d live orders, %d units were ever on sale (oversold)", r.id, live, r.total)
	}
	r.notes = append(r.notes, fmt.Sprintf("%d accepted, %d live of %d units ever on sale; %s", len(accepted), live, r.total, settled))
}

// byCode counts the flood's answers by code (status when there is none).
func (f *flood) byCode() map[string]int {
	out := map[string]int{}
	for _, a := range f.snapshot() {
		k := a.code
		if k == "" {
			k = fmt.Sprint(a.status)
		}
		out[k]++
	}
	return out
}

// giveBack gives one unit of the flood's sale back, by a buyer's cancel
// (an accepted order, once the worker persisted it) or, when there is none
// to cancel, by one more unit of stock (PUT, then the reconciler's fix);
// back is when the unit is back in Redis.
func (s *Suite) giveBack(ctx context.Context, fl *flood, put func() error, total *int64) (how string, back time.Time, err error) {
	for _, a := range fl.accepted() {
		if fl.cancelled[a.orderNo] || rand.IntN(3) == 0 {
			continue // a third of the time: more stock instead
		}
		uid := userOfRequest(a.requestID)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			code, errCode, err := coded(s.adminAPI().Cancel(ctx, a.orderNo, uid))
			switch {
			case err == nil && code == http.StatusOK:
				fl.cancelled[a.orderNo] = true
				return "cancel of " + a.orderNo, time.Now(), nil
			case errCode == string(gwclient.CodeOrderClosed), errCode == string(gwclient.CodeOrderRejected), errCode == string(gwclient.CodeOrderPaid):
				deadline = time.Time{}
			}
			time.Sleep(100 * time.Millisecond)
		}
		fl.cancelled[a.orderNo] = true
		break
	}
	*total++
	if err := put(); err != nil {
		*total--
		return "", time.Time{}, err
	}
	for try := 0; try < 10; try++ {
		if code, _ := s.reconcile(ctx, "--fix"); code == 0 {
			return "one more unit (PUT, reconciler --fix)", time.Now(), nil
		}
		time.Sleep(300 * time.Millisecond)
	}
	return "", time.Time{}, errors.New("the reconciler never fixed the raised stock")
}

// replaySoldOut retries every accepted request of the flood through
// gateway gw while the sale is sold out: each must be answered its first
// orderNo (200), never refused.
func (s *Suite) replaySoldOut(fl *flood, gw int, finding func(string, ...any)) {
	for _, a := range fl.accepted() {
		p, err := fl.api[gw].PlaceOrder(context.Background(), gwclient.OrderRequest{RequestID: a.requestID,
			UserID: userOfRequest(a.requestID), ActivityID: fl.it.ActivityID, ItemID: fl.it.ItemID, Quantity: 1})
		var e *gwclient.Error
		switch {
		case err == nil && p.OrderNo != a.orderNo:
			finding("flood-giveback: a retry of %s through gateway %d answered orderNo %s, first %s", a.requestID, gw+1, p.OrderNo, a.orderNo)
		case errors.As(err, &e) && e.Status < 500 && e.Code != gwclient.CodeKeyInProgress && e.Code != gwclient.CodeRateLimited:
			finding("flood-giveback: a retry of %s (accepted as %s) through gateway %d was refused %s", a.requestID, a.orderNo, gw+1, e.Code)
		}
	}
}

// userOfRequest is the flood user of requestId "fg-<sale>-<n>": n.
func userOfRequest(requestID string) int64 {
	var sale, n int64
	fmt.Sscanf(requestID, "fg-%d-%d", &sale, &n)
	return n
}

// preheatUntilDone preheats activity id, retrying as an operator would.
func (s *Suite) preheatUntilDone(ctx context.Context, id int64) error {
	var last string
	for range 50 {
		code, errCode, err := coded(s.adminAPI().Preheat(ctx, id))
		if code == http.StatusOK {
			return nil
		}
		last = answerText(code, errCode, err)
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("preheat never finished (last answer %s)", last)
}

// sinceAt is t as an offset from the load's start, as since prints now.
func (s *Suite) sinceAt(t time.Time) string {
	return fmt.Sprintf("+%.1fs", t.Sub(s.loadStart).Seconds())
}

// settleFlood follows every accepted order of the flood through GET until
// none is PENDING (90 s at most, as the run's drain) and counts the live
// ones (UNPAID, PAID); an orderNo a 202 gave that GET does not find by
// then is a finding.
func (s *Suite) settleFlood(ctx context.Context, accepted []floodAnswer, finding func(string, ...any)) (live int, how string) {
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	statuses := map[string]int{}
	for _, a := range accepted {
		status := ""
		// Not found yet may be a reservation Redis lost in a failover
		// that the worker has not persisted yet: asked again too.
		for status == "" || (status == gwclient.StatusPending || status == "NOT_FOUND") && time.Now().Before(deadline) {
			if status != "" {
				time.Sleep(200 * time.Millisecond)
			}
			o, err := s.adminAPI().GetOrder(ctx, a.orderNo)
			var e *gwclient.Error
			switch {
			case err == nil:
				status = o.Status
			case errors.As(err, &e) && e.Code == gwclient.CodeOrderNotFound:
				status = "NOT_FOUND"
			default:
				status = gwclient.StatusPending // unknown yet: asked again
			}
		}
		statuses[status]++
		switch status {
		case gwclient.StatusUnpaid, gwclient.StatusPaid:
			live++
		case "NOT_FOUND", gwclient.StatusPending:
			finding("flood-giveback: %s, answered 202 as %s, is %s after %s", a.requestID, a.orderNo, status, time.Since(start).Round(time.Second))
		}
	}
	return live, fmt.Sprintf("statuses %v after %s", statuses, time.Since(start).Round(100*time.Millisecond))
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
