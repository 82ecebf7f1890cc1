package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestScraperSpacing: while the load is measured the scraper reads
// /metrics no more often than it was told (a read costs the pipeline CPU
// that no floor pays), and once quickened it reads it every drainEvery.
func TestScraperSpacing(t *testing.T) {
	t.Parallel()
	var reads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reads.Add(1)
		_, _ = w.Write([]byte(rssSeries + " 1e+08\n" + lagSeries + " 0\n"))
	}))
	defer srv.Close()
	scr := newScraper(srv.URL, "")
	scr.setEvery(500 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); scr.run(ctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(1200 * time.Millisecond)
	// At 0, ~0.5 and ~1 s: a late ticker only makes it fewer.
	if n := reads.Load(); n < 1 || n > 3 {
		t.Errorf("%d reads in 1.2 s at one per 500 ms, want 1 to 3", n)
	}
	scr.setEvery(drainEvery)
	from := reads.Load()
	deadline := time.Now().Add(5 * time.Second)
	for reads.Load()-from < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := reads.Load() - from; n < 5 {
		t.Errorf("%d reads in 5 s once quickened to one per %s, want 5 or more", n, drainEvery)
	}
	if _, last := scr.rss(); last != 1e8 {
		t.Errorf("resident memory %v, want the 1e8 served", last)
	}
}

// TestScraperSlowsOnlyWhenCPUIsMeasured: a run that measures its
// processes' CPU (--proc) reads /metrics once a second while the load runs;
// any other reads it every drainEvery, so the lag's return to 0 after the
// last 202 stays timed closely.
func TestScraperSlowsOnlyWhenCPUIsMeasured(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	for _, tc := range []struct {
		procs []Proc
		want  time.Duration
	}{{nil, 0}, {[]Proc{{Name: "all", PIDs: []int{1}}}, loadEvery}} {
		scr, stop := startScraper(context.Background(), Config{URL: srv.URL, Procs: tc.procs})
		got := time.Duration(scr.every.Load())
		stop()
		if got != tc.want {
			t.Errorf("with %d --proc: at most one read every %s, want %s", len(tc.procs), got, tc.want)
		}
	}
}
