package reconciler

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	dto "github.com/prometheus/client_model/go"
)

// PushJob is the job label a --once run pushes its metrics under.
const PushJob = "orderpipe-reconciler"

// checkPushgateway rejects a PUSHGATEWAY_URL that is not an http(s) URL
// with a host (empty: no push).
func checkPushgateway(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("PUSHGATEWAY_URL: want http(s)://host:port of a Prometheus Pushgateway, got %q", raw)
	}
	return nil
}

// pushPass sends the reconciler's series (orderpipe_reconciler_*) from reg
// to the Pushgateway at base, grouped by job only, so every run replaces the
// previous run's series. It adds (POST): a family replaces the family of the
// same name, and the last-success timestamp is left out while it is 0 (this
// process has had no successful pass), so a failed run keeps the previous
// success for the overdue alert to measure from.
func pushPass(ctx context.Context, base string, reg prometheus.Gatherer) error {
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		fams, err := reg.Gather()
		var out []*dto.MetricFamily
		for _, f := range fams {
			if !strings.HasPrefix(f.GetName(), "orderpipe_reconciler_") {
				continue
			}
			if f.GetName() == "orderpipe_reconciler_last_success_timestamp_seconds" && neverSet(f) {
				continue
			}
			out = append(out, f)
		}
		return out, err
	})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return push.New(base, PushJob).Gatherer(g).Client(&http.Client{Timeout: 10 * time.Second}).AddContext(ctx)
}

func neverSet(f *dto.MetricFamily) bool {
	for _, m := range f.GetMetric() {
		if m.GetGauge().GetValue() != 0 {
			return false
		}
	}
	return true
}
