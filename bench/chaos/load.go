package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	gwclient "orderpipe/gateway/client"
)

// The load: a few clients send order requests for random users and items of
// one activity, retry a request whose answer they did not get (or got 503)
// with the same requestId, replay some accepted requests to check they get
// the first answer again, and pay some accepted orders after a random delay
// (racing the closer). Everything the clients were told is recorded, so the
// audit can hold Postgres to it.

// loadConfig shapes one scenario's load.
type loadConfig struct {
	URL        string
	ActivityID int64
	Items      []int64
	Users      int
	Clients    int
	// Stop ends the load: no new request is sent once it is closed.
	Stop <-chan struct{}
	// ReplayShare of the iterations re-send an accepted request;
	// PayShare of the accepted orders are paid after up to PayDelay.
	ReplayShare float64
	PayShare    float64
	PayDelay    time.Duration
	// Think is each client's mean pause between requests (uniform on
	// [0, 2·Think]): the load is a steady stream, not a flood.
	Think time.Duration
	// RetryFor bounds how long requests and payments are retried after
	// the load stopped (the part they wait for may still be down).
	RetryFor time.Duration
	Seed     uint64
}

// request is one requestId as the client saw it.
type request struct {
	body    orderBody
	orderNo string // from the 202 (or the first 200 replay); "" if never accepted
	final   string // last answer: HTTP status and code, or "transport"
	// mismatched: the other orderNos replays answered (each once);
	// refused: a replay was refused (a final answer without an orderNo).
	mismatched []string
	refused    []string
}

// payAnswer is the last answer to paying an order.
type payAnswer struct {
	status int
	code   string
}

// loadResult is what the clients sent and were told.
type loadResult struct {
	mu       sync.Mutex
	requests map[string]*request // by requestId
	accepted []string            // requestIds with an orderNo, in acceptance order
	attempts int
	answers  map[string]int // "202", "409 SOLD_OUT", "transport", ...
	replays  int
	// replayAnswers counts the answers to replays; all should be "200".
	replayAnswers map[string]int
	pays          map[string]payAnswer // by orderNo
	// outage is set while a scenario has Redis without the sale (keys lost,
	// not yet repaired): the gateway cannot know a replay then and refuses
	// it as NOT_ON_SALE; such refusals are counted, not judged. Replays
	// after the repair must return the first answer.
	outage        bool
	outageRefused int
	// posts is every POST /v1/orders attempt in the order they started
	// (end zero while in flight), lastPost the latest of each requestId:
	// the faults on a real cluster judge the answers of a time window.
	posts    []post
	lastPost map[string]int
}

// post is one attempt of POST /v1/orders.
type post struct {
	requestID  string
	itemID     int64
	start, end time.Time
	answer     answer
}

func newLoadResult() *loadResult {
	return &loadResult{requests: map[string]*request{}, answers: map[string]int{},
		replayAnswers: map[string]int{}, pays: map[string]payAnswer{}, lastPost: map[string]int{}}
}

// orderBody is a POST /v1/orders body.
type orderBody = gwclient.OrderRequest

type answer struct {
	status  int
	code    string
	orderNo string
	wait    time.Duration // Retry-After
}

func (a answer) String() string {
	if a.status == 0 {
		return "transport"
	}
	if a.code == "" {
		return strconv.Itoa(a.status)
	}
	return strconv.Itoa(a.status) + " " + a.code
}

// retriable: the client does not know the outcome, or was told to retry.
func (a answer) retriable() bool {
	return a.status == 0 || a.status == http.StatusServiceUnavailable || a.status == http.StatusTooManyRequests ||
		a.status >= 500 || (a.status == http.StatusConflict && a.code == "ORDER_PENDING")
}

type loader struct {
	cfg     loadConfig
	api     *gwclient.Client
	res     *loadResult
	pays    sync.WaitGroup
	stopped chan struct{} // closed RetryFor after Stop
}

// runLoad sends load until cfg.Stop is closed, then waits for the requests
// and payments in hand (retried for up to RetryFor) and returns what
// happened.
func runLoad(ctx context.Context, cfg loadConfig, res *loadResult) *loadResult {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	l := &loader{cfg: cfg, res: res, api: gwclient.New(cfg.URL)}
	l.api.HTTPClient = hc
	l.stopped = make(chan struct{})
	go func() {
		<-cfg.Stop
		time.Sleep(cfg.RetryFor)
		close(l.stopped)
	}()
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(c)))
			for n := 0; !closed(cfg.Stop) && ctx.Err() == nil; n++ {
				if cfg.Think > 0 {
					time.Sleep(time.Duration(rng.Int64N(2*int64(cfg.Think) + 1)))
				}
				if acc := l.randomAccepted(rng); acc != nil && rng.Float64() < cfg.ReplayShare {
					l.replay(ctx, acc)
					continue
				}
				b := orderBody{RequestID: fmt.Sprintf("c%d-a%d-%d-%d", cfg.Seed%1000, cfg.ActivityID, c, n),
					UserID: 1 + rng.Int64N(int64(cfg.Users)), ActivityID: cfg.ActivityID,
					ItemID: cfg.Items[rng.IntN(len(cfg.Items))], Quantity: 1 + rng.IntN(2)}
				l.send(ctx, b, rng)
			}
		}()
	}
	wg.Wait()
	l.pays.Wait()
	return l.res
}

func (l *loader) randomAccepted(rng *rand.Rand) *request {
	l.res.mu.Lock()
	defer l.res.mu.Unlock()
	if len(l.res.accepted) == 0 {
		return nil
	}
	return l.res.requests[l.res.accepted[rng.IntN(len(l.res.accepted))]]
}

// send is one new request, retried with the same requestId until it gets a
// final answer or the retries are given up.
func (l *loader) send(ctx context.Context, b orderBody, rng *rand.Rand) {
	r := &request{body: b}
	l.res.mu.Lock()
	l.res.requests[b.RequestID] = r
	l.res.mu.Unlock()
	a := l.post(ctx, b)
	l.res.mu.Lock()
	r.final = a.String()
	accepted := a.orderNo != "" && (a.status == http.StatusAccepted || a.status == http.StatusOK)
	if accepted {
		r.orderNo = a.orderNo
		l.res.accepted = append(l.res.accepted, b.RequestID)
	}
	l.res.mu.Unlock()
	if accepted && rng.Float64() < l.cfg.PayShare {
		delay := time.Duration(rng.Int64N(int64(l.cfg.PayDelay) + 1))
		l.pays.Add(1)
		go func() {
			defer l.pays.Done()
			time.Sleep(delay)
			l.pay(ctx, a.orderNo)
		}()
	}
}

// replay re-sends an accepted request: the answer must carry its orderNo.
func (l *loader) replay(ctx context.Context, r *request) {
	a := l.post(ctx, r.body)
	l.res.mu.Lock()
	defer l.res.mu.Unlock()
	l.res.replays++
	l.res.replayAnswers[a.String()]++
	switch {
	case a.orderNo != "" && a.orderNo != r.orderNo && !slices.Contains(r.mismatched, a.orderNo):
		r.mismatched = append(r.mismatched, a.orderNo)
	case a.orderNo != "" && a.orderNo != r.orderNo:
	case a.orderNo == "" && !a.retriable() && l.res.outage:
		l.res.outageRefused++
	case a.orderNo == "" && !a.retriable():
		r.refused = append(r.refused, a.String())
	}
}

// post sends the order until its answer is final or the retries are given up.
func (l *loader) post(ctx context.Context, b orderBody) answer {
	backoff := 50 * time.Millisecond
	for {
		l.res.mu.Lock()
		i := len(l.res.posts)
		l.res.posts = append(l.res.posts, post{requestID: b.RequestID, itemID: b.ItemID, start: time.Now()})
		l.res.lastPost[b.RequestID] = i
		l.res.mu.Unlock()
		p, err := l.api.PlaceOrder(ctx, b)
		a := l.record(answerOf(p.HTTPStatus, p.OrderNo, err))
		l.res.mu.Lock()
		l.res.posts[i].end, l.res.posts[i].answer = time.Now(), a
		l.res.mu.Unlock()
		if !a.retriable() || closed(l.stopped) || ctx.Err() != nil {
			return a
		}
		wait := max(a.wait, backoff)
		backoff = min(2*backoff, time.Second)
		time.Sleep(wait)
	}
}

// pay pays an order until its answer is final or the retries are given up.
func (l *loader) pay(ctx context.Context, orderNo string) {
	backoff := 100 * time.Millisecond
	for {
		_, err := l.api.Pay(ctx, orderNo)
		a := l.record(answerOf(http.StatusOK, "", err))
		if !a.retriable() || closed(l.stopped) || ctx.Err() != nil {
			l.res.mu.Lock()
			l.res.pays[orderNo] = payAnswer{status: a.status, code: a.code}
			l.res.mu.Unlock()
			return
		}
		time.Sleep(max(a.wait, backoff))
		backoff = min(2*backoff, time.Second)
	}
}

// record counts one attempt and its answer.
func (l *loader) record(a answer) answer {
	l.res.mu.Lock()
	l.res.attempts++
	l.res.answers[a.String()]++
	l.res.mu.Unlock()
	return a
}

// answerOf is what the gateway client's result says: status (and orderNo)
// on success, else the error's status, code and Retry-After, or no answer.
func answerOf(status int, orderNo string, err error) answer {
	if err == nil {
		return answer{status: status, orderNo: orderNo}
	}
	var e *gwclient.Error
	if !errors.As(err, &e) {
		return answer{} // no answer, or cut mid-answer: as good as none
	}
	a := answer{status: e.Status, wait: e.RetryAfter}
	if e.Code != gwclient.CodeUndecodable {
		a.code = string(e.Code)
	}
	return a
}

// counts are the load's figures for the report.
type counts struct {
	requests, attempts, accepted, replays, mismatched int
	paid, payClosed, payOther                         int
	outageRefused                                     int
}

func (r *loadResult) counts() counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := counts{requests: len(r.requests), attempts: r.attempts, accepted: len(r.accepted), replays: r.replays,
		outageRefused: r.outageRefused}
	for _, q := range r.requests {
		c.mismatched += len(q.mismatched)
	}
	for _, p := range r.pays {
		switch {
		case p.status == http.StatusOK:
			c.paid++
		case p.code == "ORDER_CLOSED":
			c.payClosed++
		default:
			c.payOther++
		}
	}
	return c
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// acceptedWithin counts the 202s to attempts that started at or after from
// and were answered by to.
func (r *loadResult) acceptedWithin(from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.posts {
		if p.answer.status == http.StatusAccepted && !p.start.Before(from) && !p.end.IsZero() && !p.end.After(to) {
			n++
		}
	}
	return n
}

// firstAccepted is when the first 202 came to an attempt that started at
// or after from (for one of items, or any when none given).
func (r *loadResult) firstAccepted(from time.Time, items ...int64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, p := range r.posts {
		if p.answer.status != http.StatusAccepted || p.start.Before(from) || p.end.IsZero() ||
			len(items) > 0 && !slices.Contains(items, p.itemID) {
			continue
		}
		if first.IsZero() || p.end.Before(first) {
			first = p.end
		}
	}
	return first, !first.IsZero()
}

// answersWithin counts the answers to attempts answered between from and
// to, by answer.
func (r *loadResult) answersWithin(from, to time.Time) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, p := range r.posts {
		if !p.end.IsZero() && !p.end.Before(from) && !p.end.After(to) {
			out[p.answer.String()]++
		}
	}
	return out
}

// ended503 is, per requestId whose latest attempt is over and was answered
// 503, that attempt's index.
func (r *loadResult) ended503() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for id, i := range r.lastPost {
		if !r.posts[i].end.IsZero() && r.posts[i].answer.status == http.StatusServiceUnavailable {
			out[id] = i
		}
	}
	return out
}
