package reconciler_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
	"orderpipe/reconciler"
)

// TestOncePushesThePass: a scheduled `reconciler --once` (the Kubernetes
// CronJob) is never scraped; with PUSHGATEWAY_URL its pass reaches a real
// Pushgateway under job orderpipe-reconciler — only the reconciler's series,
// the repair it made as a gauge, the schedule's period for the overdue
// alert. A later run that cannot reach Postgres pushes its failure and keeps
// the earlier success's timestamp; an unreachable Pushgateway turns a clean
// exit into 2, and a PUSHGATEWAY_URL that is not a URL is refused up front.
func TestOncePushesThePass(t *testing.T) {
	t.Parallel()
	gw := mustPushgateway(t)
	e := mustEnv(t, 10)
	stocktest.AddStock(t, e.sr, e.it, 1) // Redis holds a unit Postgres does not know of
	runCtx := func(ctx context.Context, vals map[string]string, args ...string) int {
		t.Helper()
		vals["REDIS_ADDR"], vals["REDIS_KEY_PREFIX"], vals["RECONCILE_INTERVAL"] = testenv.RedisAddr(), e.rdb.Prefix, "1m"
		vars := append(append([]setting.Var{{Name: "DATABASE_URL"}, {Name: "REDIS_KEY_PREFIX"}, {Name: "METRICS_ADDR", Default: "127.0.0.1:0"}},
			redisconn.Settings...), reconciler.Settings...)
		env := func(name string) string {
			if v, ok := vals[name]; ok {
				return v
			}
			for _, v := range vars {
				if v.Name == name {
					return v.Default
				}
			}
			t.Fatalf("undeclared setting %s", name)
			return ""
		}
		return reconciler.Main(ctx, args, env, io.Discard, io.Discard)
	}
	run := func(vals map[string]string, args ...string) int {
		t.Helper()
		return runCtx(context.Background(), vals, args...)
	}

	if code := run(map[string]string{"DATABASE_URL": e.dbURL, "PUSHGATEWAY_URL": gw}, "--once", "--fix"); code != reconciler.ExitClean {
		t.Fatalf("--once --fix exited %d, want 0 (the drift repaired)", code)
	}
	pushed := scrape(t, gw)
	for _, want := range []string{
		`orderpipe_reconciler_last_pass_repaired{activity="7",instance="",item="1",job="orderpipe-reconciler"} 1`,
		`orderpipe_reconciler_last_pass_repaired{activity="7",instance="",item="2",job="orderpipe-reconciler"} 0`,
		`orderpipe_reconciler_drift{activity="7",instance="",item="1",job="orderpipe-reconciler"} 0`,
		`orderpipe_reconciler_interval_seconds{instance="",job="orderpipe-reconciler"} 60`,
		`orderpipe_reconciler_last_pass_error{instance="",job="orderpipe-reconciler"} 0`,
		`orderpipe_reconciler_passes_total{instance="",job="orderpipe-reconciler",result="repaired"} 1`,
	} {
		if !strings.Contains(pushed, want+"\n") {
			t.Errorf("the Pushgateway has no\n  %s", want)
		}
	}
	const successSeries = `orderpipe_reconciler_last_success_timestamp_seconds{instance="",job="orderpipe-reconciler",pushed="last_success"}`
	success := value(t, pushed, successSeries)
	if age := time.Since(time.Unix(int64(success), 0)); age < -time.Second || age > time.Minute {
		t.Errorf("pushed last success %v, want about now", success)
	}
	for _, line := range strings.Split(pushed, "\n") {
		if strings.Contains(line, `job="orderpipe-reconciler"`) && !strings.HasPrefix(line, "orderpipe_reconciler_") && !strings.HasPrefix(line, "push_") {
			t.Errorf("pushed beside the reconciler's series: %s", line)
		}
	}

	// A run that checks no item (here: a database without activities)
	// leaves none of the previous run's per-item series behind: a stale
	// drift would page for ever.
	if code := run(map[string]string{"DATABASE_URL": testenv.MustDatabase(t).URL, "PUSHGATEWAY_URL": gw}, "--once"); code != reconciler.ExitClean {
		t.Fatalf("--once over no activity exited %d, want 0", code)
	}
	if pushed = scrape(t, gw); strings.Contains(pushed, `activity="7"`) {
		t.Errorf("a run that checked no item left the previous run's per-item series:\n%s", grep(pushed, `activity="7"`))
	}
	success = value(t, pushed, successSeries)

	// Postgres out of reach, and the run stopped (SIGTERM at the CronJob's
	// deadline cancels its context): exit 2, the failure still pushed, the
	// success kept.
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if code := runCtx(stopped, map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "PUSHGATEWAY_URL": gw},
		"--once"); code != reconciler.ExitError {
		t.Fatalf("--once without Postgres exited %d, want 2", code)
	}
	pushed = scrape(t, gw)
	if got := value(t, pushed, `orderpipe_reconciler_last_pass_error{instance="",job="orderpipe-reconciler"}`); got != 1 {
		t.Errorf("last pass error %v after a run without Postgres, want 1", got)
	}
	if got := value(t, pushed, successSeries); got != success {
		t.Errorf("last success %v after a failed run, want the earlier success's %v kept", got, success)
	}

	// The Pushgateway out of reach: a clean pass exits 2.
	if code := run(map[string]string{"DATABASE_URL": e.dbURL, "PUSHGATEWAY_URL": "http://127.0.0.1:1"}, "--once"); code != reconciler.ExitError {
		t.Errorf("--once with the Pushgateway down exited %d, want 2", code)
	}
	// Not a URL: refused before any pass.
	if code := run(map[string]string{"DATABASE_URL": e.dbURL, "PUSHGATEWAY_URL": "pushgateway:9091"}, "--once"); code != reconciler.ExitError {
		t.Errorf("PUSHGATEWAY_URL=pushgateway:9091 exited %d, want 2", code)
	}
}

// mustPushgateway starts a Prometheus Pushgateway on a free port for the
// test and returns its URL; the binary is found the way
// deploy/prometheus/pushgateway.sh does (testenv.MustTool).
func mustPushgateway(t *testing.T) string {
	t.Helper()
	bin := testenv.MustTool(t, "PUSHGATEWAY", "prometheus-pushgateway", "prometheus-pushgateway/usr/bin/prometheus-pushgateway",
		"deploy/prometheus/pushgateway.sh")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--web.listen-address="+addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := "http://" + addr
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Pushgateway on %s never got ready", addr)
		}
	}
}

// scrape is the Pushgateway's /metrics, as Prometheus would read it.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// grep is the lines of text that contain s.
func grep(text, s string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// value is the sample of series in a scrape.
func value(t *testing.T, scrape, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s in the scrape", series)
	return 0
}
