package reconciler

import (
	"context"
	"errors"
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

// lastSuccess is the one series pushed to a group of its own.
const lastSuccess = "orderpipe_reconciler_last_success_timestamp_seconds"

// pushTimeout bounds a push, which runs even when the pass was cut short
// (SIGTERM at the CronJob's deadline): a failed pass is reported too.
const pushTimeout = 10 * time.Second

// checkPushgateway rejects a PUSHGATEWAY_URL that is not the base URL of a
// Pushgateway: http(s), a host, no query or fragment, no /metrics/job path
// of its own (the push adds that). Empty: no push. The error shows the URL
// with any password masked.
func checkPushgateway(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" ||
		strings.Contains(u.Path, "/metrics/job") {
		return fmt.Errorf("PUSHGATEWAY_URL: want the base URL of a Prometheus Pushgateway, http(s)://host:port[/prefix] without a query, got %q",
			redactURL(raw))
	}
	return nil
}

// redactURL is raw with the password of its userinfo masked; in what does
// not parse as a URL with userinfo, all before an @.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && (u.User != nil || !strings.Contains(raw, "@")) {
		return u.Redacted()
	}
	// Not a URL with userinfo, yet an @: mask all before it but a scheme.
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		scheme, _, ok := strings.Cut(raw[:i], "://")
		if ok {
			return scheme + "://xxxxx" + raw[i:]
		}
		return "xxxxx" + raw[i:]
	}
	return raw
}

// pushPass sends the reconciler's series (orderpipe_reconciler_*) from reg
// to the Pushgateway at base, job orderpipe-reconciler, replacing what the
// previous run pushed (PUT), so an item no longer checked leaves no stale
// series behind. The last-success timestamp goes to a group of its own
// (label pushed="last_success"), replaced only by a run that succeeded, so a
// failed run keeps the previous success for the overdue alert to measure
// from. Errors show base with its password masked.
func pushPass(ctx context.Context, base string, reg prometheus.Gatherer) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pushTimeout)
	defer cancel()
	var success *dto.MetricFamily
	pass := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		fams, err := reg.Gather()
		var out []*dto.MetricFamily
		for _, f := range fams {
			switch {
			case !strings.HasPrefix(f.GetName(), "orderpipe_reconciler_"):
			case f.GetName() == lastSuccess:
				if !neverSet(f) {
					success = f
				}
			default:
				out = append(out, f)
			}
		}
		return out, err
	})
	client := &http.Client{Timeout: pushTimeout}
	err := push.New(base, PushJob).Gatherer(pass).Client(client).PushContext(ctx)
	if err == nil && success != nil {
		err = push.New(base, PushJob).Grouping("pushed", "last_success").Client(client).
			Gatherer(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return []*dto.MetricFamily{success}, nil })).
			PushContext(ctx)
	}
	if err != nil {
		// The push library's errors name the URL as given, password and all.
		msg := err.Error()
		if u, perr := url.Parse(base); perr == nil {
			if p, ok := u.User.Password(); ok && p != "" {
				for _, form := range []string{url.PathEscape(p), url.QueryEscape(p), p} {
					msg = strings.ReplaceAll(msg, form, "xxxxx")
				}
			}
		}
		return errors.New(msg)
	}
	return nil
}

func neverSet(f *dto.MetricFamily) bool {
	for _, m := range f.GetMetric() {
		if m.GetGauge().GetValue() != 0 {
			return false
		}
	}
	return true
}
