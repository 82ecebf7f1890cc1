package bench

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Series the bench reads from the pipeline's /metrics.
const (
	lagSeries = "orderpipe_worker_consumer_lag_messages"
	rssSeries = "process_resident_memory_bytes"
	cpuSeries = "process_cpu_seconds_total"
)

// scraper polls the gateway's /metrics for its resident memory and the
// worker's /metrics for the consumer lag, and keeps every process's
// resident memory and CPU time over the run for the HTML report. In
// `orderpipe all` both are the one process running gateway, worker and
// broker.
type scraper struct {
	urls   []string // the gateway's, then the worker's if it is another
	client *http.Client
	procs  []procSeries // by url
	// every is the least time between two scrapes, in nanoseconds
	// (loadEvery while the load is measured, then drainEvery).
	every atomic.Int64

	mu       sync.Mutex
	samples  []lagSample
	lastLag  float64
	haveLag  bool
	peak     float64
	rssPeak  float64
	rssLast  float64
	haveRSS  bool
	failures int
}

type lagSample struct {
	at  time.Time
	lag float64
}

// procSeries is one process's resident memory and CPU time as scraped.
type procSeries struct {
	name    string
	samples []procSample
}

type procSample struct {
	at       time.Time
	rss, cpu float64 // bytes, CPU seconds since the process started; -1 unread
}

func newScraper(gateway, worker string) *scraper {
	urls := []string{gateway}
	procs := []procSeries{{name: "gateway"}}
	if worker != "" && worker != gateway {
		urls = append(urls, worker)
		procs = append(procs, procSeries{name: "worker"})
	} else {
		procs[0].name = "orderpipe all"
	}
	return &scraper{urls: urls, procs: procs, client: &http.Client{Timeout: 2 * time.Second}}
}

// How often the pipeline's /metrics is read. One read costs `orderpipe
// all` about 2 ms of CPU (the process collector, every series encoded and
// compressed), so while the load runs with its processes' CPU measured
// (--proc) it is read once a second — every 100 ms it added some 20 µs to
// each order's CPU at 1000 req/s, which no floor pays — and otherwise, and
// once the load is over, every 100 ms: the lag's return to 0 (after the
// load, after the last 202) is timed from these reads.
const (
	loadEvery  = time.Second
	drainEvery = 100 * time.Millisecond
)

// setEvery sets the least time between two scrapes from now on.
func (s *scraper) setEvery(d time.Duration) { s.every.Store(int64(d)) }

// run scrapes every endpoint at once, then again whenever the least time
// between scrapes (setEvery; drainEvery until set) has passed, until ctx
// ends.
func (s *scraper) run(ctx context.Context) {
	t := time.NewTicker(drainEvery)
	defer t.Stop()
	var last time.Time
	for {
		if every := time.Duration(s.every.Load()); every <= 0 || time.Since(last) >= every-drainEvery/2 {
			last = time.Now()
			for i, u := range s.urls {
				s.scrape(ctx, i, u, i == 0, i == len(s.urls)-1)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrape reads endpoint i: its process's memory and CPU, the gateway's
// resident memory if rss, the lag if lag.
func (s *scraper) scrape(ctx context.Context, i int, url string, rss, lag bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	res, err := s.client.Do(req)
	if err != nil {
		s.mu.Lock()
		s.failures++
		s.mu.Unlock()
		return
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return
	}
	now := time.Now()
	proc := procSample{at: now, rss: -1, cpu: -1}
	defer func() {
		s.mu.Lock()
		s.procs[i].samples = append(s.procs[i].samples, proc)
		s.mu.Unlock()
	}()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || !(name == lagSeries || name == rssSeries || name == cpuSeries) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case rssSeries:
			proc.rss = v
		case cpuSeries:
			proc.cpu = v
			continue
		}
		if !(lag && name == lagSeries || rss && name == rssSeries) {
			continue
		}
		s.mu.Lock()
		if name == lagSeries {
			s.samples = append(s.samples, lagSample{now, v})
			s.lastLag, s.haveLag = v, true
			s.peak = max(s.peak, v)
		} else {
			s.rssLast, s.haveRSS = v, true
			s.rssPeak = max(s.rssPeak, v)
		}
		s.mu.Unlock()
	}
}

func (s *scraper) lagString() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.haveLag {
		return "?"
	}
	return strconv.FormatFloat(s.lastLag, 'f', 0, 64)
}

func (s *scraper) peakLag() (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.haveLag
}

// zeroSince is how long after t the lag gauge read 0 and stayed there; -1
// if it never did (or cannot be read).
func (s *scraper) zeroSince(t time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var at time.Time
	for _, x := range s.samples {
		switch {
		case x.at.Before(t):
			if x.lag == 0 && at.IsZero() {
				at = t // already at 0 when the load ended
			} else if x.lag != 0 {
				at = time.Time{}
			}
		case x.lag != 0:
			at = time.Time{}
		case at.IsZero():
			at = x.at
		}
	}
	if at.IsZero() {
		return -1
	}
	return at.Sub(t)
}

// rss is the peak and the last resident memory seen, in bytes (-1 unknown).
func (s *scraper) rss() (peak, last float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.haveRSS {
		return -1, -1
	}
	return s.rssPeak, s.rssLast
}

// timeline is what the scraper kept over the run, for the HTML report.
func (s *scraper) timeline() ([]procSeries, []lagSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	procs := make([]procSeries, len(s.procs))
	for i, p := range s.procs {
		procs[i] = procSeries{name: p.name, samples: slices.Clone(p.samples)}
	}
	return procs, slices.Clone(s.samples)
}
