package bench

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Series the bench reads from the pipeline's /metrics.
const (
	lagSeries = "orderpipe_worker_consumer_lag_messages"
	rssSeries = "process_resident_memory_bytes"
)

// scraper polls the gateway's /metrics for its resident memory and the
// worker's /metrics for the consumer lag. In `orderpipe all` both are the
// one process running gateway, worker and broker.
type scraper struct {
	urls   []string // the gateway's, then the worker's if it is another
	client *http.Client

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

func newScraper(gateway, worker string) *scraper {
	urls := []string{gateway}
	if worker != "" && worker != gateway {
		urls = append(urls, worker)
	}
	return &scraper{urls: urls, client: &http.Client{Timeout: 2 * time.Second}}
}

func (s *scraper) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for i, u := range s.urls {
			s.scrape(ctx, u, i == 0, i == len(s.urls)-1)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrape reads one endpoint: the resident memory if rss, the lag if lag.
func (s *scraper) scrape(ctx context.Context, url string, rss, lag bool) {
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
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || !(lag && name == lagSeries || rss && name == rssSeries) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
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
