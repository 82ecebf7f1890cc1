package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/gateway/client"
	"orderpipe/pkg/database"
	"orderpipe/pkg/event"
	"orderpipe/pkg/invariant"
	"orderpipe/pkg/order"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/stock"
)

// Run creates and preheats a sale through the admin API, sends the load,
// waits for the pipeline to drain and audits it. An error means the run could
// not be made; a failed invariant is in the report (Report.OK).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.AdminToken == "" {
		return nil, fmt.Errorf("ADMIN_TOKEN is empty: the bench creates its sale through the admin API")
	}
	client := newHTTPClient(cfg.Concurrency, cfg.Timeout)
	defer client.CloseIdleConnections()
	api := newAPI(client, cfg.URL, cfg.AdminToken)
	// Ready first: a starting pipeline may still be creating its database.
	if err := waitReady(ctx, api, cfg.WaitReady); err != nil {
		return nil, err
	}
	a, closeStores, err := openAuditor(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer closeStores()
	if err := createSale(ctx, api, cfg, a.items); err != nil {
		return nil, err
	}
	work := plan(cfg, a.items)
	scr, stopScraper := startScraper(ctx, cfg)
	defer stopScraper()

	fmt.Fprintf(cfg.Progress, "bench: activity %d, %d item(s) × %d units, %d requests at c=%d against %s (seed %d)\n",
		cfg.ActivityID, cfg.Items, cfg.Stock, cfg.Requests, cfg.Concurrency, cfg.URL, cfg.Seed)
	var floor *Arrival
	var floorHalf *Half
	if cfg.FloorURL != "" {
		if floor, floorHalf, err = measureFloor(ctx, client, cfg, work); err != nil {
			return nil, err
		}
		fmt.Fprintf(cfg.Progress, "bench: then the gateway: %d requests %s at %s\n", len(work), cfg.loop(), cfg.URL)
	}
	load, err := sendLoad(ctx, client, cfg, work, scr)
	if err != nil {
		return nil, err
	}
	// The halves are measured: the drain is timed from the lag, closely.
	scr.setEvery(drainEvery)
	acc := accepted(work, load.answers)
	drainedAt, drainErr := a.waitDrained(ctx, len(acc), load.end, cfg.DrainTimeout, scr, cfg.Progress)
	audit, err := a.audit(ctx, acc, usersByItem(work))
	if err != nil {
		return nil, err
	}
	rep := newReport(cfg, work, load.answers, load.took, audit)
	rep.addLoad(cfg, load, scr, floor, floorHalf)
	rep.addDrain(load, scr, drainedAt, drainErr)
	rep.check()
	return rep, nil
}

// openAuditor opens the Postgres pool and Redis client the audit reads and
// returns the auditor of this run's items with a closer for both.
func openAuditor(ctx context.Context, cfg Config) (*auditor, func(), error) {
	pool, err := database.Open(ctx, cfg.DatabaseURL, 4)
	if err != nil {
		return nil, nil, err
	}
	rdb, err := cfg.Redis.New(redisconn.Options{PoolSize: 8, ReadTimeout: 5 * time.Second})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	closeStores := func() { rdb.Close(); pool.Close() }
	if err := rdb.Ping(ctx).Err(); err != nil {
		closeStores()
		return nil, nil, fmt.Errorf("reaching redis at %s: %w", cfg.Redis, err)
	}
	items := make([]int64, cfg.Items)
	for i := range items {
		items[i] = int64(i + 1)
	}
	a := &auditor{orders: order.NewStore(pool), st: stock.New(rdb, cfg.RedisPrefix), activityID: cfg.ActivityID, items: items, buckets: cfg.Buckets}
	if len(cfg.KafkaBrokers) > 0 {
		topic := cfg.StatusTopic
		if topic == "" {
			topic = event.StatusTopic
		}
		a.status = &invariant.StatusTopic{Topic: topic, Client: &kafka.Client{Addr: kafka.TCP(cfg.KafkaBrokers...), Timeout: 10 * time.Second,
			Transport: cfg.KafkaSecurity.Transport(5 * time.Second)}}
	}
	return a, closeStores, nil
}

// startScraper samples the gateway's and worker's metrics every drainEvery,
// or once a second (loadEvery) while a run that measures its processes'
// CPU (--proc) sends its load — the caller quickens it for the drain —
// until the returned stop, which waits for the last sample so the report
// reads a series nobody is still writing.
func startScraper(ctx context.Context, cfg Config) (*scraper, func()) {
	scr := newScraper(cfg.URL+"/metrics", cfg.WorkerMetrics)
	if len(cfg.Procs) > 0 {
		scr.setEvery(loadEvery)
	}
	scrCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); scr.run(scrCtx) }()
	return scr, func() { cancel(); <-done }
}

// loadResult is what sending the load leaves for the drain wait and the report.
type loadResult struct {
	answers    []answer
	took       time.Duration // from the first send to the last answer
	end        time.Time     // when sending was over
	lastAccept time.Time     // the last 202 (end when none was accepted)
	open       openStats
	procs      []ProcCPU
}

// sendLoad drives the work against the gateway while the process meter runs.
func sendLoad(ctx context.Context, client *http.Client, cfg Config, work []request, scr *scraper) (loadResult, error) {
	meter := startProcMeter(cfg.Procs)
	answers, took, lastAccept, open, err := drive(ctx, client, cfg, work, scr)
	if err != nil {
		return loadResult{}, err
	}
	res := loadResult{answers: answers, took: took, lastAccept: lastAccept, open: open, procs: meter.stop(len(work))}
	res.end = time.Now()
	if err := ctx.Err(); err != nil {
		return loadResult{}, fmt.Errorf("load interrupted: %w", err)
	}
	if res.lastAccept.IsZero() {
		res.lastAccept = res.end
	}
	return res, nil
}

// addLoad puts the load's timeline, arrival figures and CPU in the report.
func (rep *Report) addLoad(cfg Config, load loadResult, scr *scraper, floor *Arrival, floorHalf *Half) {
	rep.timeline = &timeline{start: load.end.Add(-load.took), answers: load.answers}
	rep.timeline.procs, rep.timeline.lag = scr.timeline()
	// An open loop's throughput counts from its first intended send time,
	// which may precede the first actual send.
	elapsed := load.took
	if cfg.Rate > 0 {
		rep.OpenLoop = newOpenLoop(cfg, newArrival(cfg.URL, load.answers, load.open), floor)
		elapsed = load.open.elapsed
	}
	rep.Floor, rep.Pipeline = floorHalf, newHalf("pipeline", cfg.URL, load.answers, elapsed, load.procs)
}

// addDrain puts how long the pipeline took to settle in the report; -1 is
// "never seen" (no lag metric, or lag never reached 0 for good).
func (rep *Report) addDrain(load loadResult, scr *scraper, drainedAt time.Time, drainErr error) {
	rep.DrainMs, rep.DrainAfterLastAcceptMs = ms(drainedAt.Sub(load.end)), ms(drainedAt.Sub(load.lastAccept))
	if drainErr != nil {
		rep.DrainError = drainErr.Error()
	}
	rep.PeakConsumerLag, rep.LagZeroAfterMs, rep.LagZeroAfterLastAcceptMs = -1, -1, -1
	if peak, ok := scr.peakLag(); ok {
		rep.PeakConsumerLag = peak
	}
	if d := scr.zeroSince(load.end); d >= 0 {
		rep.LagZeroAfterMs = ms(d)
	}
	if d := scr.zeroSince(load.lastAccept); d >= 0 {
		rep.LagZeroAfterLastAcceptMs = ms(d)
	}
	rep.PeakRSSBytes, rep.RSSBytes = scr.rss()
}

func newHTTPClient(conc int, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		MaxIdleConns:        conc + 8,
		MaxIdleConnsPerHost: conc + 8,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// newAPI is the gateway's client (gateway/client) over the bench's HTTP client.
func newAPI(hc *http.Client, base, adminToken string) *client.Client {
	c := client.New(base)
	c.HTTPClient, c.AdminToken, c.UserAgent = hc, adminToken, "orderpipe-bench"
	return c
}

// waitReady polls /readyz until it answers 200 or within passes.
func waitReady(ctx context.Context, api *client.Client, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		_, err := api.Ready(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pipeline at %s not ready: %w", api.BaseURL, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// createSale creates the activity (on sale from a minute ago for an hour,
// one unit per user) and preheats it, each call retried when retriable.
func createSale(ctx context.Context, api *client.Client, cfg Config, items []int64) error {
	a := client.ActivityUpsert{Name: fmt.Sprintf("bench %d", cfg.ActivityID), StartsAt: time.Now().Add(-time.Minute).UTC(),
		EndsAt: time.Now().Add(time.Hour).UTC(), PerUserLimit: cfg.Quantity}
	// One bucket is sent as none, the default a storefront leaves out (and
	// a gateway older than bucketed stock takes).
	buckets := cfg.Buckets
	if buckets == 1 {
		buckets = 0
	}
	for _, id := range items {
		a.Items = append(a.Items, client.ItemUpsert{ItemID: id, Stock: cfg.Stock, Buckets: buckets})
	}
	// Both calls are idempotent: a 503 (the order store past its timeout
	// on a busy machine) is retried a few times.
	if err := client.RetryIdempotent(ctx, func() error { _, err := api.PutActivity(ctx, cfg.ActivityID, a); return err }); err != nil {
		return fmt.Errorf("creating activity %d: %w", cfg.ActivityID, err)
	}
	if err := client.RetryIdempotent(ctx, func() error { _, err := api.Preheat(ctx, cfg.ActivityID); return err }); err != nil {
		return fmt.Errorf("preheating activity %d: %w", cfg.ActivityID, err)
	}
	return nil
}

// kind is what a planned request stands for.
type kind uint8

const (
	fresh  kind = iota // a new user
	retry              // a client retry: same requestId and payload as an earlier request
	repeat             // the same user again with a new requestId
)

// request is one planned POST /v1/orders.
type request struct {
	id     string
	userID int64
	itemID int64
	kind   kind
	body   []byte
}

// plan draws the workload. Retries and repeats copy a request among the last
// 2·c, so they usually race the original while it is in flight: the hard case
// for the dedup record and the per-user limit.
func plan(cfg Config, items []int64) []request {
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x0b5e55ed))
	run := "b" + strconv.FormatInt(cfg.ActivityID, 36) + "-"
	window := max(1, 2*cfg.Concurrency)
	out := make([]request, cfg.Requests)
	for i := range out {
		x := rng.Float64()
		if i > 0 && x < cfg.RetryShare+cfg.RepeatShare {
			j := i - 1 - rng.IntN(min(i, window))
			r := out[j]
			if x < cfg.RetryShare {
				r.kind = retry
			} else {
				r.kind = repeat
				r.id = run + strconv.Itoa(i)
				r.body = orderBody(r, cfg)
			}
			out[i] = r
			continue
		}
		r := request{id: run + strconv.Itoa(i), userID: rng.Int64N(1<<40) + 1, itemID: items[rng.IntN(len(items))], kind: fresh}
		r.body = orderBody(r, cfg)
		out[i] = r
	}
	return out
}

// usersByItem lists each item's distinct users in the workload.
func usersByItem(work []request) map[int64][]int64 {
	seen := map[[2]int64]bool{}
	out := map[int64][]int64{}
	for _, r := range work {
		k := [2]int64{r.itemID, r.userID}
		if !seen[k] {
			seen[k] = true
			out[r.itemID] = append(out[r.itemID], r.userID)
		}
	}
	return out
}

func orderBody(r request, cfg Config) []byte {
	return fmt.Appendf(nil, `{"requestId":%q,"userId":%d,"activityId":%d,"itemId":%d,"quantity":%d}`,
		r.id, r.userID, cfg.ActivityID, r.itemID, cfg.Quantity)
}

// answer is what the client saw for one request.
type answer struct {
	status   int    // 0 ⇒ no answer (transport error or timeout)
	code     string // error code of an error answer
	orderNo  string
	replayed bool
	latency  time.Duration
	end      time.Time // when the answer (or the failure) came
}

// counters are the live totals the progress line shows.
type counters struct {
	done, accepted, replayed, rejected, failed atomic.Int64
	lastAccept                                 atomic.Int64 // unix ns of the last 202
}

// count adds one answer to the totals.
func (cnt *counters) count(a answer) {
	cnt.done.Add(1)
	switch {
	case a.status == http.StatusAccepted:
		cnt.accepted.Add(1)
		now := time.Now().UnixNano()
		for last := cnt.lastAccept.Load(); now > last && !cnt.lastAccept.CompareAndSwap(last, now); last = cnt.lastAccept.Load() {
		}
	case a.status == http.StatusOK:
		cnt.replayed.Add(1)
	case a.status == 0:
		cnt.failed.Add(1)
	default:
		cnt.rejected.Add(1)
	}
}

// drive sends the planned requests to the gateway, in a closed loop from
// cfg.Concurrency goroutines or, with cfg.Rate, on an open-loop schedule
// (driveOpen), and returns each answer (by plan index), the wall time of the
// load, when the last 202 arrived (zero if none did) and the open loop's
// figures (zero in a closed loop).
func drive(ctx context.Context, client *http.Client, cfg Config, work []request, scr *scraper) ([]answer, time.Duration, time.Time, openStats, error) {
	var cnt counters
	stop := make(chan struct{})
	progDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(progDone)
		progress(cfg.Progress, start, len(work), &cnt, scr, stop)
	}()
	var answers []answer
	var st openStats
	var err error
	if cfg.Rate > 0 {
		answers, st, err = driveOpen(ctx, client, cfg.URL, cfg, work, cnt.count)
	} else {
		answers, err = driveClosed(ctx, client, cfg.URL, cfg, work, &cnt)
	}
	elapsed := time.Since(start)
	close(stop)
	<-progDone
	if err != nil {
		return nil, 0, time.Time{}, st, err
	}
	var last time.Time
	if n := cnt.lastAccept.Load(); n > 0 {
		last = time.Unix(0, n)
	}
	return answers, elapsed, last, st, nil
}

// driveClosed sends the planned requests to base+"/v1/orders" from
// cfg.Concurrency goroutines, each waiting for its answer before it sends
// the next.
func driveClosed(ctx context.Context, client *http.Client, base string, cfg Config, work []request, cnt *counters) ([]answer, error) {
	senders := make([]*sender, cfg.Concurrency)
	for i := range senders {
		var err error
		if senders[i], err = newSender(client, base, cfg.Timeout); err != nil {
			return nil, err
		}
	}
	answers := make([]answer, len(work))
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, snd := range senders {
		wg.Go(func() {
			defer snd.close()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(work) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				status, raw := snd.send(ctx, work[i].body)
				answers[i] = answerOf(status, raw, time.Since(t0))
				cnt.count(answers[i])
			}
		})
	}
	wg.Wait()
	return answers, nil
}

func progress(w io.Writer, start time.Time, total int, cnt *counters, scr *scraper, stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := int64(0)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		done := cnt.done.Load()
		fmt.Fprintf(w, "bench: %3.0fs  sent %d/%d  %5d req/s  202 %d  200 %d  4xx/5xx %d  no answer %d  lag %s\n",
			time.Since(start).Seconds(), done, total, done-last, cnt.accepted.Load(), cnt.replayed.Load(),
			cnt.rejected.Load(), cnt.failed.Load(), scr.lagString())
		last = done
	}
}

// answerOf reads what the client needs from one answer, as the gateway's
// client reads it (client.ReadPlaced).
func answerOf(status int, raw []byte, latency time.Duration) answer {
	a := answer{status: status, latency: latency, end: time.Now()}
	if status == 0 {
		return a
	}
	p, err := client.ReadPlaced(status, "", raw)
	a.orderNo, a.replayed, a.code = p.OrderNo, p.Replayed, string(client.CodeOf(err))
	if a.code == string(client.CodeUndecodable) && status >= 300 {
		a.code = "HTTP_" + strconv.Itoa(a.status)
	}
	return a
}

// acceptance is what the client was told about one requestId: a 202, or a
// replayed 200 (the client then also believes it was accepted).
type acceptance struct {
	orderNo    string
	accepts    int  // 202 answers for this requestId (more than one breaks I3)
	mismatched bool // answers named different orderNos (breaks I3)
}

func accepted(work []request, answers []answer) map[string]*acceptance {
	acc := map[string]*acceptance{}
	for i, a := range answers {
		if a.status != http.StatusAccepted && !(a.status == http.StatusOK && a.replayed) {
			continue
		}
		e := acc[work[i].id]
		if e == nil {
			e = &acceptance{orderNo: a.orderNo}
			acc[work[i].id] = e
		}
		if a.status == http.StatusAccepted {
			e.accepts++
		}
		if a.orderNo != e.orderNo {
			e.mismatched = true
		}
	}
	return acc
}
