package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// The open-loop mode (--rate): requests arrive at a constant rate whatever
// the server does, as a storefront's users would. A closed loop (c workers,
// each waiting for its answer) sends nothing while the server stalls, so the
// requests the stall would have delayed are never measured (coordinated
// omission). Here request i is due at start + i/rate, whether or not earlier
// answers have come back, and its latency runs from that intended time to
// the last byte of its answer: a stalled server's delay is charged to every
// request that was due meanwhile, and so is any delay of the client itself.

// intended is when request i of a schedule at rate req/s starting at start
// is due.
func intended(start time.Time, i int, rate float64) time.Time {
	return start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
}

// dueBy is how many requests of the schedule are due at now: those with
// intended time ≤ now, at most n.
func dueBy(start, now time.Time, rate float64, n int) int {
	if now.Before(start) {
		return 0
	}
	k := int(now.Sub(start).Seconds()*rate) + 1
	// Float rounding may put k one off either way; intended() is the truth.
	for k > 0 && intended(start, k-1, rate).After(now) {
		k--
	}
	for k < n && !intended(start, k, rate).After(now) {
		k++
	}
	return min(k, n)
}

// openStats is what the open-loop driver saw beside the answers.
type openStats struct {
	// late counts requests that found every connection busy at their
	// intended time and had to wait for one: the client could not send
	// them on time (their wait is in their latency).
	late int
	// sendLag is, per request, from its intended time to the start of its
	// write: the client's own delay (scheduling, a busy connection).
	sendLag []time.Duration
	elapsed time.Duration // from the first intended time to the last answer
}

// driveOpen sends work to base+"/v1/orders" on the schedule of cfg.Rate
// over at most cfg.Concurrency connections (each a goroutine with its own
// keep-alive connection), and returns each answer with its latency measured
// from the request's intended time. onAnswer, when set, is called with each
// answer as it arrives (live counters).
func driveOpen(ctx context.Context, client *http.Client, base string, cfg Config, work []request, onAnswer func(answer)) ([]answer, openStats, error) {
	senders := make([]*sender, cfg.Concurrency)
	for i := range senders {
		var err error
		if senders[i], err = newSender(client, base, cfg.Timeout); err != nil {
			return nil, openStats{}, err
		}
		// Connected before the schedule starts: a dial is not a request's.
		if err := senders[i].dial(ctx); err != nil {
			for _, s := range senders[:i+1] {
				s.close()
			}
			return nil, openStats{}, fmt.Errorf("connecting to %s: %w", base, err)
		}
	}
	answers := make([]answer, len(work))
	lag := make([]time.Duration, len(work))
	// jobs holds every request, so the scheduler never blocks on it; free
	// is connections minus requests dispatched and not yet answered.
	jobs := make(chan int, len(work))
	var free atomic.Int64
	free.Store(int64(len(senders)))
	start := time.Now().Add(10 * time.Millisecond) // the senders' goroutines start first
	var wg sync.WaitGroup
	for _, snd := range senders {
		wg.Go(func() {
			defer snd.close()
			for i := range jobs {
				due := intended(start, i, cfg.Rate)
				lag[i] = time.Since(due)
				status, raw := snd.send(ctx, work[i].body)
				answers[i] = answerOf(status, raw, time.Since(due))
				free.Add(1)
				if onAnswer != nil {
					onAnswer(answers[i])
				}
			}
		})
	}
	st := openStats{}
	for next := 0; next < len(work) && ctx.Err() == nil; {
		due := dueBy(start, time.Now(), cfg.Rate, len(work))
		for ; next < due; next++ {
			if free.Add(-1) < 0 {
				st.late++
			}
			jobs <- next
		}
		if next < len(work) {
			sleepUntil(ctx, intended(start, next, cfg.Rate))
		}
	}
	close(jobs)
	wg.Wait()
	st.elapsed = time.Since(start)
	st.sendLag = lag
	return answers, st, nil
}

func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// OpenLoop is an open-loop run's figures: the gateway's and, at the same
// rate with the same requests, the trivial handler's (the floor).
type OpenLoop struct {
	Rate        float64  `json:"rate"`        // req/s scheduled
	Connections int      `json:"connections"` // the most requests in flight at once
	Gateway     Arrival  `json:"gateway"`
	Floor       *Arrival `json:"floor,omitempty"` // nil: no --floor-url
	// FloorName says what the floor was (--floor-name): the trivial handler,
	// or the minimal pipeline of the contract's exchanges (bench/floorpipe).
	FloorName string `json:"floorName,omitempty"`
	// P99Ratio is the gateway's P99 over the floor's (0: no floor).
	P99Ratio float64 `json:"p99Ratio,omitempty"`
}

// Arrival is one target's side of an open-loop run.
type Arrival struct {
	URL        string         `json:"url"`
	Requests   int            `json:"requests"`
	Answered   int            `json:"answered"` // with any HTTP status
	Status     map[string]int `json:"status"`
	Late       int            `json:"late"` // found every connection busy at their intended time
	SendLagP99 float64        `json:"sendLagP99Ms"`
	SendLagMax float64        `json:"sendLagMaxMs"`
	// AchievedRate is requests ÷ the time from the first intended send to
	// the last answer.
	AchievedRate float64 `json:"achievedRate"`
	Latency      Latency `json:"latencyMs"` // from each request's intended time
}

func newArrival(url string, answers []answer, st openStats) Arrival {
	a := Arrival{URL: url, Requests: len(answers), Late: st.late, Status: map[string]int{}}
	lat := make([]time.Duration, len(answers))
	for i, ans := range answers {
		lat[i] = ans.latency
		if ans.status != 0 {
			a.Answered++
		}
		a.Status[statusName(ans.status)]++
	}
	a.Latency = latencyOf(lat)
	if lag := slices.Clone(st.sendLag); len(lag) > 0 {
		slices.Sort(lag)
		a.SendLagP99, a.SendLagMax = ms(pct(lag, .99)), ms(lag[len(lag)-1])
	}
	if st.elapsed > 0 {
		a.AchievedRate = float64(len(answers)) / st.elapsed.Seconds()
	}
	return a
}

func statusName(status int) string {
	if status == 0 {
		return "none"
	}
	return strconv.Itoa(status)
}

// measureFloor sends work to the floor at cfg.FloorURL as the gateway will
// get it: on the open-loop schedule of cfg.Rate (its Arrival, nil in a
// closed loop) or from cfg.Concurrency workers; the Half has its figures
// and the CPU of every --proc.
func measureFloor(ctx context.Context, client *http.Client, cfg Config, work []request) (*Arrival, *Half, error) {
	if err := waitReady(ctx, newAPI(client, cfg.FloorURL, ""), cfg.WaitReady); err != nil {
		return nil, nil, fmt.Errorf("the %s (--floor-url): %w", cfg.FloorName, err)
	}
	fmt.Fprintf(cfg.Progress, "bench: the floor first: %d requests %s against the %s at %s\n",
		len(work), cfg.loop(), cfg.FloorName, cfg.FloorURL)
	meter := startProcMeter(cfg.Procs)
	var answers []answer
	var st openStats
	var err error
	start := time.Now()
	if cfg.Rate > 0 {
		answers, st, err = driveOpen(ctx, client, cfg.FloorURL, cfg, work, nil)
	} else {
		answers, err = driveClosed(ctx, client, cfg.FloorURL, cfg, work, &counters{})
		st.elapsed = time.Since(start)
	}
	if err != nil {
		return nil, nil, err
	}
	procs := meter.stop(len(work))
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("floor run interrupted: %w", err)
	}
	h := newHalf(cfg.FloorName, cfg.FloorURL, answers, st.elapsed, procs)
	if cfg.Rate <= 0 {
		return nil, h, nil
	}
	a := newArrival(cfg.FloorURL, answers, st)
	return &a, h, nil
}

// loop says how a half is sent, for the progress lines.
func (c Config) loop() string {
	if c.Rate > 0 {
		return fmt.Sprintf("at %.0f req/s over at most %d connections", c.Rate, c.Concurrency)
	}
	return fmt.Sprintf("from %d workers (closed loop)", c.Concurrency)
}

func newOpenLoop(cfg Config, gw Arrival, floor *Arrival) *OpenLoop {
	o := &OpenLoop{Rate: cfg.Rate, Connections: cfg.Concurrency, Gateway: gw, Floor: floor}
	if floor != nil {
		o.FloorName = cfg.FloorName
	}
	if floor != nil && floor.Latency.P99 > 0 {
		o.P99Ratio = gw.Latency.P99 / floor.Latency.P99
	}
	return o
}

// WriteText writes the open-loop figures, the gateway beside the floor.
func (o *OpenLoop) WriteText(w io.Writer) {
	fmt.Fprintf(w, "open loop: %.0f req/s scheduled, at most %d connections; latency from each request's intended time (ms):\n",
		o.Rate, o.Connections)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  \tP50\tP99\tP99.9\tmax\tmean\tachieved req/s\tlate\tsend lag P99 / max\tanswers")
	row := func(name string, a *Arrival) {
		l := a.Latency
		fmt.Fprintf(tw, "  %s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%d\t%.2f / %.2f\t%s\n", name, l.P50, l.P99, l.P999, l.Max, l.Mean,
			a.AchievedRate, a.Late, a.SendLagP99, a.SendLagMax, countList(a.Status))
	}
	row("gateway", &o.Gateway)
	if o.Floor != nil {
		row(o.floorName(), o.Floor)
	}
	tw.Flush()
	if o.Floor != nil {
		fmt.Fprintf(w, "  gateway / %s: P50 ×%.1f, P99 ×%.1f, P99.9 ×%.1f\n", o.floorName(), ratio(o.Gateway.Latency.P50, o.Floor.Latency.P50),
			o.P99Ratio, ratio(o.Gateway.Latency.P999, o.Floor.Latency.P999))
	}
}

// floorName is FloorName, "trivial handler" in reports written before it.
func (o *OpenLoop) floorName() string { return cmp.Or(o.FloorName, "trivial handler") }

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
