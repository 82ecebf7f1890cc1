package deploy

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"orderpipe/pkg/testenv"
)

// The Prometheus rules (deploy/prometheus/orderpipe-rules.yml) and their unit
// tests (orderpipe-rules_test.yml), run with promtool. That every metric they
// name is exported by a running pipeline is checked in the root package
// (monitoring_e2e_test.go), which can start one.

const (
	rulesFile     = "prometheus/orderpipe-rules.yml"
	rulesTestFile = "prometheus/orderpipe-rules_test.yml"
)

// mustPromtool finds promtool the way deploy/prometheus/promtool.sh does
// (PROMTOOL, the PATH, its cache), without fetching (testenv.MustTool).
func mustPromtool(t *testing.T) string {
	t.Helper()
	return testenv.MustTool(t, "PROMTOOL", "promtool", "prometheus/usr/bin/promtool", "deploy/prometheus/promtool.sh")
}

func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(mustPromtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPrometheusRules: the rules are valid, their unit tests pass, and the
// compose Prometheus's config (which loads them) is valid.
func TestPrometheusRules(t *testing.T) {
	t.Parallel()
	promtool(t, "prometheus", "check", "rules", filepath.Base(rulesFile))
	promtool(t, "prometheus", "check", "config", "prometheus.yml")
	out := promtool(t, "prometheus", "test", "rules", filepath.Base(rulesTestFile))
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules:\n%s", out)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Record      string            `json:"record"`
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func mustRules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	if err := yaml.Unmarshal(mustRead(t, rulesFile), &f); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// TestAlertsAreActionableAndTested: every alert says how bad it is, what
// happened and where the runbook is (a heading that exists), and the unit
// tests show each one firing — an alert never seen to fire may never fire.
func TestAlertsAreActionableAndTested(t *testing.T) {
	t.Parallel()
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
			PromqlExprTest []struct {
				Expr string `json:"expr"`
			} `json:"promql_expr_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(mustRead(t, rulesTestFile), &tests); err != nil {
		t.Fatal(err)
	}
	fires, quiet, exprs := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
		for _, e := range tc.PromqlExprTest {
			exprs[e.Expr] = true
		}
	}
	alerts := 0
	for _, r := range mustRules(t) {
		if r.Alert == "" {
			continue
		}
		alerts++
		t.Run(r.Alert, func(t *testing.T) {
			if s := r.Labels["severity"]; s != "page" && s != "ticket" {
				t.Errorf("severity %q, want page or ticket", s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("no %s annotation", a)
				}
			}
			// The runbook is a section of docs/oncall.md, the on-call
			// document: not a heading somewhere else, not the whole file.
			if file, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "#"); file != "docs/oncall.md" || anchor == "" {
				t.Errorf("runbook_url %q, want docs/oncall.md#<section>", r.Annotations["runbook_url"])
			}
			checkRunbook(t, r.Annotations["runbook_url"])
			if !fires[r.Alert] {
				t.Error("no unit test shows it firing")
			}
			if !quiet[r.Alert] {
				t.Error("no unit test shows it quiet")
			}
		})
	}
	// What on-call must act on: each has an alert.
	for _, want := range []string{"OrderpipeStockDrift", "OrderpipeDBStockMismatch", "OrderpipeDuplicateLiveOrder",
		"OrderpipeCircuitBreakerOpen", "OrderpipeCompensationsPendingTooLong", "OrderpipeDeadLetters",
		"OrderpipeConsumerLagGrowing", "OrderpipeCloserStalled", "OrderpipeRedriveStalled", "OrderpipeHigh5xxRatio",
		"OrderpipeReconcileOverdue", "OrderpipeStatusOutboxStuck"} {
		if !fires[want] {
			t.Errorf("alert %s is missing or never tested firing", want)
		}
	}
	for _, want := range []string{"orderpipe:intake_requests:rate1m", "orderpipe:http_request_duration_seconds:p99_5m",
		"orderpipe:worker_consumer_lag_messages:max", "orderpipe:http_5xx_ratio:rate5m"} {
		if !exprs[want] {
			t.Errorf("recording rule %s has no unit test", want)
		}
	}
	if alerts < 10 {
		t.Errorf("%d alerts", alerts)
	}
}

// checkRunbook: "docs/x.md#anchor" names a file of the repo with that heading.
func checkRunbook(t *testing.T, ref string) {
	t.Helper()
	file, anchor, _ := strings.Cut(ref, "#")
	doc := string(mustRead(t, filepath.Join(root, file)))
	if anchor == "" {
		return
	}
	var anchors []string
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "#") {
			anchors = append(anchors, slug(strings.TrimLeft(line, "# ")))
		}
	}
	if !slices.Contains(anchors, anchor) {
		t.Errorf("runbook %s: no such heading in %s (has %v)", ref, file, anchors)
	}
}

// slug is GitHub's anchor of a Markdown heading.
func slug(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}
