package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// workerCounters are the worker's counters the report shows per scenario.
var workerCounters = []string{
	"orderpipe_redrive_republished_total", // stranded reservations re-published
	"orderpipe_worker_duplicates_total",   // events of requests already decided (redelivery, redrive)
	"orderpipe_worker_ghosts_total",       // events of reservations the gateway aborted
	"orderpipe_worker_dlq_total",          // dead letters
}

// scrape reads the unlabelled counters names from a Prometheus endpoint.
func scrape(ctx context.Context, url string, names []string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, res.Status)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || !want[name] {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = f
		}
	}
	return out, sc.Err()
}

// workerSample is every worker's counters (nil when unreadable) and how
// often each was started.
type workerSample struct {
	values []map[string]float64
	starts []int
}

func (s *Suite) sampleWorkers(ctx context.Context) workerSample {
	var w workerSample
	for i, u := range s.workerMetrics {
		v, err := scrape(ctx, u, workerCounters)
		if err != nil {
			v = nil
		}
		w.values = append(w.values, v)
		w.starts = append(w.starts, s.workers()[i].startCount())
	}
	return w
}

// delta sums what the workers counted between w and after.
func (w workerSample) delta(after workerSample) counterDelta {
	d := counterDelta{values: map[string]float64{}}
	for i := range w.values {
		if w.values[i] == nil || after.values[i] == nil {
			return counterDelta{}
		}
		restarted := after.starts[i] != w.starts[i]
		d.restarted = d.restarted || restarted
		for _, n := range workerCounters {
			if restarted {
				d.values[n] += after.values[i][n]
			} else {
				d.values[n] += after.values[i][n] - w.values[i][n]
			}
		}
	}
	return d
}

// counterDelta is what the workers counted during a scenario; a worker
// restarted meanwhile counts from its restart, so the figure is a lower
// bound ("≥").
type counterDelta struct {
	values    map[string]float64
	restarted bool
}

func (d counterDelta) String() string {
	if d.values == nil {
		return "worker counters n/a"
	}
	ge := ""
	if d.restarted {
		ge = "≥"
	}
	short := func(n string) string {
		n = strings.TrimPrefix(strings.TrimSuffix(n, "_total"), "orderpipe_")
		return strings.TrimPrefix(n, "worker_")
	}
	var parts []string
	for _, n := range workerCounters {
		parts = append(parts, fmt.Sprintf("%s %s%.0f", short(n), ge, d.values[n]))
	}
	return "worker: " + strings.Join(parts, ", ")
}
