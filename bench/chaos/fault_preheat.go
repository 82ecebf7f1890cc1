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
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
)

// The preheat fault: a preheat of a fresh activity with Postgres or Redis
// paused at the step that matters, then a bucket count change of it, then
// the preheat retried until it finishes, while probe clients order the
// fresh item all along. The rule it judges (docs/lifecycle.md "Preheat"):
// an item sells only once Postgres records it preheated and Redis holds its
// sale laid out as Postgres fixed it. Its findings are the run's problems:
//
//   - an order accepted (202) before Postgres recorded the item preheated
//     (item_stock.preheated_at, which keeps its first time);
//   - the bucket count changed (PUT answered 200) while Redis held keys of
//     the item, or Redis's sale names another count than Postgres;
//   - a preheat that never finishes once the fault is over.
//
// The fresh item stays preheated: the reconciler's check after the run
// holds it to I5 like the run's own items.

// preheatFaults: about one every 10 s of load, from a stream of its own so
// the other streams (and the seeds' meaning before it) are unchanged. Half
// of them (all without the suite's own PostgreSQL) pause the Redis primary
// 1.2–3 s (above REDIS_TIMEOUT) once Postgres has fixed the item's layout;
// the others pause PostgreSQL 2.5–4 s (above the gateway's 2 s bound on a
// Postgres call) once Redis holds the item's stock, so recording the item
// preheated fails. A draw that would overlap a store fault on the same
// target is left out (pausing a process another fault is restarting tells
// nothing).
func preheatFaults(seed uint64, loadFor time.Duration, withPG bool, stores []fault) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x70726568656174))
	drawn := schedule(rng, loadFor, 10*time.Second, func() fault {
		if withPG && rng.IntN(2) == 0 {
			return fault{Kind: "preheat-cut", Target: "postgres", For: between(rng, 2500*time.Millisecond, 4*time.Second)}
		}
		return fault{Kind: "preheat-cut", Target: "redis", For: between(rng, 1200*time.Millisecond, 3*time.Second)}
	}, func(fault) time.Duration { return 0 })
	var out []fault
	for _, f := range drawn {
		clear := true
		for _, g := range stores {
			if g.Target == f.Target && g.At < f.At+f.For+preheatSlack && f.At < g.At+g.For+storeSettle(g) {
				clear = false
			}
		}
		if clear {
			out = append(out, f)
		}
	}
	return out
}

// preheatSlack is how long a preheat fault holds its target besides its
// pause: the sale's creation, the wait for the step, the retries.
const preheatSlack = 3 * time.Second

// preheatSales numbers the fresh activities within a run.
var preheatSales atomic.Int64

// preheatFindings are the preheat faults' findings not yet taken by the run.
var preheatFindings struct {
	mu   sync.Mutex
	list []string
}

func preheatFinding(format string, args ...any) {
	preheatFindings.mu.Lock()
	defer preheatFindings.mu.Unlock()
	preheatFindings.list = append(preheatFindings.list, fmt.Sprintf(format, args...))
}

// takePreheatFindings returns and forgets the findings so far.
func takePreheatFindings() []string {
	preheatFindings.mu.Lock()
	defer preheatFindings.mu.Unlock()
	out := preheatFindings.list
	preheatFindings.list = nil
	return out
}

var preheatClient = &http.Client{Timeout: 10 * time.Second}

// preheatCut runs one preheat fault on a fresh activity of the run's sale act.
func (s *Suite) preheatCut(ctx context.Context, f fault, act int64) (string, error) {
	at := s.since()
	id := act*1000 + preheatSales.Add(1)
	buckets := max(s.cfg.Buckets, 2)
	const units = 40
	it := stock.Item{ActivityID: id, ItemID: 1}
	desc := fmt.Sprintf("preheat-cut of sale %d (%d buckets) at %s", id, buckets, at)
	if code, _, err := s.putPreheatSale(ctx, id, units, buckets); err != nil || code != http.StatusOK {
		return desc, fmt.Errorf("creating the sale: %d %v", code, err)
	}
	probeCtx, stopProbe := context.WithCancel(ctx)
	probe := make(chan []time.Time, 1)
	go func() { probe <- s.probeOrders(probeCtx, it) }()
	defer stopProbe()

	first := make(chan string, 1)
	go func() {
		code, errCode, err := coded(s.adminAPI().Preheat(ctx, id))
		first <- answerText(code, errCode, err)
	}()
	firstAnswer := s.waitPreheatStep(ctx, f.Target, it, first)
	paused := "not paused (the preheat was done first)"
	if firstAnswer == "" {
		var err error
		if paused, err = s.pausePreheat(f); err != nil {
			return desc, err
		}
		firstAnswer = <-first
	}

	// A layout change now: refused once a preheat began, else allowed only
	// while Redis holds nothing of the item.
	held := s.itemKeysHeld(ctx, it, buckets+1)
	code, errCode, err := s.putPreheatSale(ctx, id, units, buckets+1)
	layout := answerText(code, errCode, err)
	if code == http.StatusOK && held != "" {
		preheatFinding("preheat: sale %d's bucket count changed %d → %d (PUT answered 200) while Redis held %s",
			id, buckets, buckets+1, held)
	}

	retries, last := s.finishPreheat(ctx, id)
	time.Sleep(500 * time.Millisecond) // the probe buys some after the preheat too
	stopProbe()
	accepted := <-probe
	early, err := s.checkPreheatRecorded(ctx, it, accepted)
	if err != nil {
		return desc, err
	}
	return fmt.Sprintf("%s: %s; first answer %s; layout change %s; finished after %d retries (%s); %d orders accepted, %d before Postgres recorded the preheat",
		desc, paused, firstAnswer, layout, retries, last, len(accepted), early), nil
}

// waitPreheatStep waits (10 s at most) for the preheat to reach the step
// that matters to a fault on target: Redis loaded (Postgres next records
// the item preheated), or Postgres has fixed the layout (Redis next). It
// returns the preheat's answer if that came first, "" once the step is
// reached.
func (s *Suite) waitPreheatStep(ctx context.Context, target string, it stock.Item, first <-chan string) string {
	reached := func() bool {
		if target == "postgres" {
			n, err := s.stock.BucketStocks(ctx, it, 1)
			return err == nil && n[0] != nil
		}
		p, err := ordertest.PreheatOf(ctx, s.pool, it.ActivityID, 1)
		return err == nil && p.Started
	}
	var answer string
	deadline := time.Now().Add(10 * time.Second)
	for answer == "" && !reached() && time.Now().Before(deadline) {
		select {
		case answer = <-first:
		default:
			// As short as the step is: the fault must land between the two stores.
			time.Sleep(200 * time.Microsecond)
		}
	}
	return answer
}

// pausePreheat pauses the fault's target for its time, mid-preheat.
func (s *Suite) pausePreheat(f fault) (string, error) {
	p := s.pauseTarget(f.Target)
	if err := p.pause(); err != nil {
		return "", err
	}
	time.Sleep(f.For)
	if err := p.resume(); err != nil {
		return "", err
	}
	step := "had fixed the layout in Postgres"
	if f.Target == "postgres" {
		step = "had loaded Redis"
	}
	return fmt.Sprintf("%s paused %s once the preheat %s", p.name, f.For.Round(10*time.Millisecond), step), nil
}

// finishPreheat finishes the preheat as an operator would: it retries until
// the answer is 200, and after 100 retries notes that it never finished.
func (s *Suite) finishPreheat(ctx context.Context, id int64) (retries int, last string) {
	for done := false; !done; retries++ {
		code, errCode, err := coded(s.adminAPI().Preheat(ctx, id))
		last, done = answerText(code, errCode, err), code == http.StatusOK
		if !done {
			if retries >= 100 {
				preheatFinding("preheat: sale %d never finished its preheat once the fault was over (last answer %s)", id, last)
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	return retries, last
}

// checkPreheatRecorded notes orders accepted (at the times in accepted)
// before Postgres recorded the item preheated, which it returns the count
// of, and a bucket count on sale in Redis other than Postgres's.
func (s *Suite) checkPreheatRecorded(ctx context.Context, it stock.Item, accepted []time.Time) (early int, err error) {
	id := it.ActivityID
	p, err := ordertest.PreheatOf(ctx, s.pool, id, 1)
	if err != nil {
		return 0, fmt.Errorf("reading the item: %w", err)
	}
	marked, pgBuckets := p.PreheatedAt, p.Buckets
	for _, t := range accepted {
		if marked == nil || !marked.Before(t) {
			early++
		}
	}
	if early > 0 {
		preheatFinding("preheat: sale %d sold %d of %d accepted orders before Postgres recorded it preheated (at %v)",
			id, early, len(accepted), marked)
	}
	if n, known, err := s.stock.Buckets(ctx, it); err == nil && known && n != pgBuckets {
		preheatFinding("preheat: sale %d is on sale in Redis with %d buckets, Postgres says %d", id, n, pgBuckets)
	}
	return early, nil
}

// putPreheatSale creates or replaces the fresh activity id.
func (s *Suite) putPreheatSale(ctx context.Context, id int64, units, buckets int) (int, string, error) {
	now := time.Now().UTC()
	return coded(s.adminAPI().PutActivity(ctx, id, gwclient.ActivityUpsert{Name: fmt.Sprintf("preheat %d", id),
		StartsAt: now.Add(-time.Minute).Truncate(time.Second), EndsAt: now.Add(time.Hour).Truncate(time.Second), PerUserLimit: 1,
		Items: []gwclient.ItemUpsert{{ItemID: 1, Stock: int64(units), Buckets: buckets}}}))
}

// adminAPI is the client of a gateway picked at random, for an admin call.
func (s *Suite) adminAPI() *gwclient.Client {
	api := gwclient.New(s.httpURLs[rand.IntN(len(s.httpURLs))])
	api.HTTPClient, api.AdminToken = preheatClient, s.adminToken
	return api
}

// coded is a call's HTTP status and error code (200 and "" when it
// succeeded), or the transport error.
func coded[T any](_ T, err error) (int, string, error) {
	var e *gwclient.Error
	switch {
	case err == nil:
		return http.StatusOK, "", nil
	case errors.As(err, &e):
		return e.Status, string(e.Code), nil
	}
	return 0, "", err
}

func answerText(code int, errCode string, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("error (%v)", err)
	case errCode != "":
		return fmt.Sprintf("%d %s", code, errCode)
	}
	return fmt.Sprint(code)
}

// probeOrders orders the item, a new user every 20 ms, until ctx ends, and
// returns when each accepted order's answer arrived.
func (s *Suite) probeOrders(ctx context.Context, it stock.Item) []time.Time {
	var accepted []time.Time
	for u := int64(1); ctx.Err() == nil; u++ {
		api := gwclient.New(s.httpURLs[int(u)%len(s.httpURLs)])
		api.HTTPClient = preheatClient
		// Not bound to ctx: an order in flight when the probe stops is
		// answered and counted all the same.
		p, err := api.PlaceOrder(context.Background(), gwclient.OrderRequest{RequestID: fmt.Sprintf("pc-%d-%d", it.ActivityID, u),
			UserID: u, ActivityID: it.ActivityID, ItemID: it.ItemID, Quantity: 1})
		if err == nil && p.HTTPStatus == http.StatusAccepted {
			accepted = append(accepted, time.Now())
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return accepted
}

// itemKeysHeld names the keys Redis holds of the item's first buckets
// buckets ("" for none): the stock keys and sale hashes.
func (s *Suite) itemKeysHeld(ctx context.Context, it stock.Item, buckets int) string {
	var held []string
	for b := range buckets {
		bi := it
		bi.Bucket = b
		held = append(held, stocktest.HeldKeys(ctx, s.sr, bi)...)
	}
	return strings.Join(held, ", ")
}
