package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Scenario is the run's parameters, as given.
type Scenario struct {
	URL         string  `json:"url"`
	ActivityID  int64   `json:"activityId"`
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	Items       int     `json:"items"`
	Stock       int64   `json:"stockPerItem"`
	Quantity    int     `json:"quantity"`
	Buckets     int     `json:"buckets,omitempty"` // stock buckets per item (bucketed stock)
	RetryShare  float64 `json:"retryShare"`
	RepeatShare float64 `json:"repeatShare"`
	Seed        int64   `json:"seed"`
	Rate        float64 `json:"rate,omitempty"` // open loop: req/s scheduled
	SoldOut     bool    `json:"soldOut,omitempty"`
}

// Latency percentiles, in milliseconds, measured at the client per request.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// latencyOf is the percentiles of lat, exact (nearest rank over every
// latency); it sorts lat.
func latencyOf(lat []time.Duration) Latency {
	n := len(lat)
	if n == 0 {
		return Latency{}
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return Latency{P50: ms(pct(lat, .50)), P90: ms(pct(lat, .90)), P95: ms(pct(lat, .95)), P99: ms(pct(lat, .99)), P999: ms(pct(lat, .999)),
		Max: ms(lat[n-1]), Mean: ms(sum / time.Duration(n))}
}

// Check is one invariant's verdict.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Report is the result of a load run.
type Report struct {
	Scenario Scenario `json:"scenario"`

	Requests       int            `json:"requests"`
	Fresh          int            `json:"fresh"`
	Retries        int            `json:"retries"`
	Repeats        int            `json:"repeats"`
	Accepted       int            `json:"accepted"` // 202 answers
	Replayed       int            `json:"replayed"` // 200 answers with replayed:true
	RejectedByCode map[string]int `json:"rejectedByCode"`
	NoAnswer       int            `json:"noAnswer"` // transport error or client timeout
	// AcceptedRequests is the distinct requestIds the client was told were
	// accepted (a 202, or a replayed 200).
	AcceptedRequests int `json:"acceptedRequests"`
	DoubleAccepted   int `json:"doubleAccepted"` // requestIds answered 202 more than once
	ReplayMismatch   int `json:"replayMismatch"` // requestIds answered with different orderNos

	OrdersInDB      int64 `json:"ordersInDb"` // live (UNPAID, PAID) orders
	FinalDBStock    int64 `json:"finalDbStock"`
	FinalRedisStock int64 `json:"finalRedisStock"`
	Audit           Audit `json:"audit"`

	LoadMs    float64 `json:"loadMs"`
	ReqPerSec float64 `json:"reqPerSec"`
	Latency   Latency `json:"latencyMs"`
	// Drained: every journal entry decided, every accepted request has its
	// processed_requests row, no compensation pending. Measured from the end
	// of the load and from the last 202 (the sale may sell out long before
	// the load ends, leaving the worker time to catch up).
	DrainMs                float64 `json:"drainMs"`
	DrainAfterLastAcceptMs float64 `json:"drainAfterLastAcceptMs"`
	DrainError             string  `json:"drainError,omitempty"`
	// The worker's orderpipe_worker_consumer_lag_messages gauge, sampled every 100ms
	// (-1: not readable); "zero after" is when it read 0 for good. The worker
	// updates it every WORKER_LAG_INTERVAL (bench/run.sh sets 100ms; the 2s
	// default would round these times up by as much).
	PeakConsumerLag          float64 `json:"peakConsumerLag"`
	LagZeroAfterMs           float64 `json:"lagZeroAfterMs"`
	LagZeroAfterLastAcceptMs float64 `json:"lagZeroAfterLastAcceptMs"`
	PeakRSSBytes             float64 `json:"peakRssBytes"` // of the process serving the gateway's /metrics; -1: not readable
	RSSBytes                 float64 `json:"rssBytes"`

	// OpenLoop is the open-loop run's figures (--rate), nil in a closed loop.
	OpenLoop *OpenLoop `json:"openLoop,omitempty"`
	// Floor and Pipeline are the measured halves side by side (Floor nil:
	// no --floor-url), with the CPU of every --proc process in each.
	Floor    *Half `json:"floor,omitempty"`
	Pipeline *Half `json:"pipeline,omitempty"`

	Checks []Check `json:"checks"`
	OK     bool    `json:"ok"`

	timeline *timeline // for WriteHTML; nil when the run kept none
}

func newReport(cfg Config, work []request, answers []answer, load time.Duration, au Audit) *Report {
	r := &Report{
		Scenario: Scenario{URL: cfg.URL, ActivityID: cfg.ActivityID, Concurrency: cfg.Concurrency, Requests: cfg.Requests,
			Items: cfg.Items, Stock: cfg.Stock, Quantity: cfg.Quantity, Buckets: cfg.Buckets, RetryShare: cfg.RetryShare, RepeatShare: cfg.RepeatShare, Seed: cfg.Seed,
			Rate: cfg.Rate, SoldOut: cfg.SoldOut},
		Requests: len(work), RejectedByCode: map[string]int{}, Audit: au, LoadMs: ms(load),
	}
	lat := make([]time.Duration, 0, len(answers))
	for i, a := range answers {
		switch work[i].kind {
		case fresh:
			r.Fresh++
		case retry:
			r.Retries++
		case repeat:
			r.Repeats++
		}
		switch {
		case a.status == 0:
			r.NoAnswer++
		case a.status == http.StatusAccepted:
			r.Accepted++
		case a.status == http.StatusOK && a.replayed:
			r.Replayed++
		default:
			code := a.code
			if code == "" {
				code = fmt.Sprintf("HTTP_%d", a.status)
			}
			r.RejectedByCode[code]++
		}
		lat = append(lat, a.latency)
	}
	acc := accepted(work, answers)
	r.AcceptedRequests = len(acc)
	for _, e := range acc {
		if e.accepts > 1 {
			r.DoubleAccepted++
		}
		if e.mismatched {
			r.ReplayMismatch++
		}
	}
	r.Latency = latencyOf(lat)
	if load > 0 {
		r.ReqPerSec = float64(len(work)) / load.Seconds()
	}
	for _, it := range au.Items {
		r.OrdersInDB += it.LiveOrders
		r.FinalDBStock += it.DBStock
		r.FinalRedisStock += it.RedisStock
	}
	return r
}

// check fills Checks and OK from the invariant checker's violations and
// what only the load tool knows: what the client was told (two 202s for one
// requestId, replays naming different orders), the drain, the counts.
func (r *Report) check() {
	au := r.Audit
	i3 := au.violations("I3")
	i3 = append(i3, nonzero(map[string]int64{
		"requestIds answered 202 twice":        int64(r.DoubleAccepted),
		"requestIds answered different orders": int64(r.ReplayMismatch),
	})...)
	i4 := au.violations("I4")
	if len(i4) > 0 {
		i4 = append([]string{fmt.Sprintf("%d accepted orderNos do not resolve (e.g. requests %s)", au.Lost, strings.Join(au.LostSample, ", "))},
			i4[:min(len(i4), 5)]...)
	}
	if r.DrainError != "" {
		i4 = append(i4, r.DrainError)
	}
	i5 := au.violations("I5")
	var orders, initial int64
	for _, n := range au.OrdersByStatus {
		orders += n
	}
	for _, it := range au.Items {
		initial += it.InitialStock
	}
	// Postgres rejecting what Redis reserved means Redis let it through.
	for _, reason := range []string{"DB_STOCK_MISMATCH", "DUPLICATE_LIVE_ORDER"} {
		if n := au.RejectedInDB[reason]; n > 0 {
			i5 = append(i5, fmt.Sprintf("Redis reserved %d requests Postgres rejected with %s", n, reason))
		}
	}
	var counts []string
	if au.CreatedInDB != orders {
		counts = append(counts, fmt.Sprintf("%d CREATED processed_requests for %d orders", au.CreatedInDB, orders))
	}
	if units := int64(r.AcceptedRequests * r.Scenario.Quantity); units > initial {
		counts = append(counts, fmt.Sprintf("clients were told %d units were accepted of %d in stock", units, initial))
	}
	r.Checks = []Check{
		verdict("I1 no oversell", au.violations("I1")),
		verdict("I2 one live order per user", au.violations("I2")),
		verdict("I3 one order per requestId", i3),
		verdict("I4 nothing lost", i4),
		verdict("I5 Redis agrees with Postgres", i5),
		verdict("I6 never paid and closed", au.violations("I6")),
		verdict("counts add up", counts),
	}
	if au.StatusChecked {
		r.Checks = append(r.Checks, verdict("I7 every state on orders.status, in order", au.violations("I7")))
	}
	r.OK = true
	for _, c := range r.Checks {
		r.OK = r.OK && c.OK
	}
}

func verdict(name string, problems []string) Check {
	if len(problems) == 0 {
		return Check{Name: name, OK: true, Detail: "ok"}
	}
	if len(problems) > 10 {
		problems = append(problems[:10:10], fmt.Sprintf("… and %d more", len(problems)-10))
	}
	return Check{Name: name, Detail: strings.Join(problems, "; ")}
}

func nonzero(m map[string]int64) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] != 0 {
			out = append(out, fmt.Sprintf("%d %s", m[k], k))
		}
	}
	return out
}

// WriteText writes the report as a table.
func (r *Report) WriteText(w io.Writer) {
	s := r.Scenario
	fmt.Fprintf(w, "\norderpipe bench: activity %d, %d item(s) × %d units, c=%d, n=%d, retries %.0f%%, repeats %.0f%%, seed %d\n",
		s.ActivityID, s.Items, s.Stock, s.Concurrency, s.Requests, 100*s.RetryShare, 100*s.RepeatShare, s.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "  %s\t"+format+"\n", append([]any{k}, args...)...)
	}
	row("requests", "%d (fresh %d, retries %d, repeats %d)", r.Requests, r.Fresh, r.Retries, r.Repeats)
	row("accepted (202)", "%d", r.Accepted)
	row("replayed (200)", "%d", r.Replayed)
	row("rejected by code", "%s", countList(r.RejectedByCode))
	row("no answer", "%d", r.NoAnswer)
	row("orders in DB (live)", "%d  %s", r.OrdersInDB, countList(r.Audit.OrdersByStatus))
	row("rejected in DB", "%s", countList(r.Audit.RejectedInDB))
	row("final stock DB / Redis", "%d / %d", r.FinalDBStock, r.FinalRedisStock)
	if s.Buckets > 1 {
		var per []string
		for _, it := range r.Audit.Items {
			per = append(per, fmt.Sprint(it.BucketStocks))
		}
		row("buckets, final stock each", "%d, %s", s.Buckets, strings.Join(per, " "))
	}
	row("oversold units", "%d", r.Audit.OversoldUnits)
	row("duplicates", "%d users, %d requestIds", r.Audit.DuplicateUsers, r.Audit.DuplicateReqIDs+int64(r.DoubleAccepted))
	row("lost", "%d", r.Audit.Lost)
	if r.OpenLoop != nil {
		row("throughput", "%.0f req/s over %.2fs (open loop at %.0f req/s)", r.ReqPerSec, r.LoadMs/1000, r.OpenLoop.Rate)
	} else {
		row("throughput", "%.0f req/s over %.2fs", r.ReqPerSec, r.LoadMs/1000)
	}
	row("latency (ms)", "p50 %.2f  p95 %.2f  p99 %.2f  p99.9 %.2f  max %.2f", r.Latency.P50, r.Latency.P95, r.Latency.P99,
		r.Latency.P999, r.Latency.Max)
	drain := fmt.Sprintf("%.0f ms after the load, %.0f ms after the last 202", r.DrainMs, r.DrainAfterLastAcceptMs)
	if r.DrainError != "" {
		drain += " (" + r.DrainError + ")"
	}
	row("drain", "%s", drain)
	row("consumer lag", "peak %s; 0 for good %s after the load, %s after the last 202", unknown(r.PeakConsumerLag, "%.0f"),
		unknown(r.LagZeroAfterMs, "%.0f ms"), unknown(r.LagZeroAfterLastAcceptMs, "%.0f ms"))
	row("gateway RSS", "peak %s, end %s", unknown(r.PeakRSSBytes/(1<<20), "%.1f MiB"), unknown(r.RSSBytes/(1<<20), "%.1f MiB"))
	tw.Flush()
	if r.OpenLoop != nil {
		r.OpenLoop.WriteText(w)
	}
	r.writeHalves(w)
	fmt.Fprintln(w, "invariants:")
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s: %s\n", mark, c.Name, c.Detail)
	}
}

// writeHalves writes the floor beside the pipeline, when there is a floor
// or a --proc to show.
func (r *Report) writeHalves(w io.Writer) {
	if r.Pipeline == nil || (r.Floor == nil && len(r.Pipeline.Procs) == 0) {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if r.Floor != nil {
		fmt.Fprintf(w, "%s beside the pipeline, the same %d requests each:\n", r.Floor.Name, r.Requests)
		fmt.Fprintf(tw, "  \t%s\tpipeline\tpipeline ÷ floor\n", r.Floor.Name)
	} else {
		fmt.Fprintln(w, "CPU of the named processes (--proc) over the load:")
	}
	for _, row := range halfRows(r.Floor, r.Pipeline, r.Scenario.SoldOut) {
		if r.Floor != nil {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", row[0], row[1], row[2], row[3])
		} else if strings.Contains(row[0], "CPU") {
			fmt.Fprintf(tw, "  %s\t%s\n", row[0], row[2])
		}
	}
	tw.Flush()
	if len(r.Pipeline.Procs) > 0 {
		fmt.Fprintf(w, "  CPU from /proc/PID/stat at both ends of each half, in 10 ms clock ticks: ±%.2f µs per request\n", tickResolution(r.Pipeline.Requests))
	}
	for _, n := range procNotes(r.Floor, r.Pipeline) {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

func countList[V int | int64](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func unknown(v float64, format string) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf(format, v)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the q-quantile of sorted (nearest rank).
func pct(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func writeJSONFile(path string, v any) error {
	if path == "" {
		return nil
	}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func writeHTMLFile(path string, r *Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := r.WriteHTML(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Passed reports whether every invariant held.
func (r *Report) Passed() bool { return r.OK }
