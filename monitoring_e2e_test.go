package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
	"orderpipe/pkg/webhook"
)

// The files whose queries name orderpipe's metrics.
const (
	rulesPath     = "deploy/prometheus/orderpipe-rules.yml"
	dashboardPath = "deploy/grafana/orderpipe.json"
)

// exposition is what one or more /metrics answers exported: every sample's
// labels by series name (a histogram's _bucket, _sum and _count included).
type exposition map[string][]map[string]string

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func (e exposition) add(raw []byte) {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[kv[1]] = kv[2]
		}
		e[m[1]] = append(e[m[1]], labels)
	}
}

// testMonitoringUsesExportedMetrics: every metric the Prometheus rules and the
// Grafana dashboard query is exported by a running pipeline (gateway, worker,
// closer, and a reconciler loop) after some orders, with the label values
// their selectors pick (route="POST /v1/orders", reason="DB_STOCK_MISMATCH",
// result="ok", ...); every recording rule they use is defined. A renamed
// metric or label breaks this test, not a silent alert.
func testMonitoringUsesExportedMetrics(t *testing.T, e engine) {
	t.Parallel()
	hooks := mustHookReceiver(t) // the webhook series exist per endpoint
	p := mustPipeline(t, e, components{"gateway", "worker", "closer", "webhook"}, func(c *config) {
		eps, err := webhook.ParseEndpoints([]string{hooks.srv.URL + "/in"})
		if err != nil {
			t.Fatal(err)
		}
		key, err := webhook.ParseSecret(webhookSecret)
		if err != nil {
			t.Fatal(err)
		}
		c.Webhook.Endpoints, c.Webhook.Secret = eps, key
	})
	it := stock.Item{ActivityID: 1, ItemID: 7}
	p.mustSale(t, 1, 1, map[int64]int64{7: 2})
	for i := range 3 { // two accepted, one sold out
		p.order(t, orderBody{RequestID: fmt.Sprintf("mon-%d", i), UserID: int64(100 + i), ActivityID: 1, ItemID: 7, Quantity: 1})
	}
	p.waitDrained(t, it)
	p.do(t, http.MethodGet, "/readyz", "", nil)

	// A reconciler loop, with its own /metrics.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recAddr := ln.Addr().String()
	ln.Close()
	cfg := p.Cfg
	cfg.Telemetry.MetricsAddr = recAddr
	cfg.Reconciler.Interval = 50 * time.Millisecond
	ctx, stop := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() { exited <- runReconciler(ctx, testLog(), cfg, nil, io.Discard) }()
	defer func() {
		stop()
		if code := <-exited; code != 0 {
			t.Errorf("reconciler loop exited %d", code)
		}
	}()

	got := exposition{}
	testenv.WaitFor(t, 20*time.Second, "a reconciler pass and the closer's and the redrive's first passes", func() bool {
		res, err := http.Get("http://" + recAddr + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		_, gw, err := get(t, p.URL+"/metrics")
		if err != nil {
			return false
		}
		got = exposition{}
		got.add(raw)
		got.add(gw)
		return got.has("orderpipe_reconciler_drift", map[string]string{"activity": "1", "item": "7"}) &&
			got.value(gw, `orderpipe_closer_passes_total{result="ok"}`) > 0 &&
			got.value(gw, `orderpipe_redrive_passes_total{result="ok"}`) > 0
	})

	queries := map[string][]string{rulesPath: ruleExprs(t), dashboardPath: dashboardExprs(t)}
	recorded := recordingRules(t)
	used := 0
	for file, exprs := range queries {
		for _, expr := range exprs {
			for _, name := range metricNames.FindAllString(expr, -1) {
				used++
				if strings.Contains(name, ":") {
					if !recorded[name] {
						t.Errorf("%s: %q uses the recording rule %s, which %s does not define", file, expr, name, rulesPath)
					}
					continue
				}
				if len(got[name]) == 0 {
					t.Errorf("%s: %q uses %s, which no /metrics exports (exported: %s)", file, expr, name, got.names())
				}
			}
			for _, sel := range selectors.FindAllStringSubmatch(expr, -1) {
				name := sel[1]
				for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
					if m[2] != "=" || strings.Contains(m[3], "$") { // regexps and dashboard variables: not literal values
						continue
					}
					if !got.has(name, map[string]string{m[1]: m[3]}) && !strings.Contains(name, ":") {
						t.Errorf("%s: %q selects %s{%s=%q}, which no exported sample has", file, expr, name, m[1], m[3])
					}
				}
			}
		}
	}
	if used < 30 {
		t.Errorf("only %d metric references found: the extraction no longer matches the files", used)
	}
}

var (
	metricNames = regexp.MustCompile(`\borderpipe[_:][a-zA-Z0-9_:]*`)
	selectors   = regexp.MustCompile(`\b(orderpipe[_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)
	matcher     = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
)

func (e exposition) has(name string, labels map[string]string) bool {
	for _, s := range e[name] {
		ok := true
		for k, v := range labels {
			ok = ok && s[k] == v
		}
		if ok {
			return true
		}
	}
	return false
}

// value reads one series' value from an exposition text (-1 if absent).
func (e exposition) value(raw []byte, series string) float64 {
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

func (e exposition) names() string {
	var out []string
	for n := range e {
		if strings.HasPrefix(n, "orderpipe") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

type promRules struct {
	Groups []struct {
		Rules []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

func mustPromRules(t *testing.T) promRules {
	t.Helper()
	raw, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var r promRules
	if err := yaml.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s: %v", rulesPath, err)
	}
	return r
}

func ruleExprs(t *testing.T) []string {
	var out []string
	for _, g := range mustPromRules(t).Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

func recordingRules(t *testing.T) map[string]bool {
	out := map[string]bool{}
	for _, g := range mustPromRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out[r.Record] = true
			}
		}
	}
	return out
}

// grafanaPanel is the part of a Grafana panel that holds queries (rows nest
// their panels when collapsed).
type grafanaPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// dashboardExprs is every query of the Grafana dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var out []string
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}
