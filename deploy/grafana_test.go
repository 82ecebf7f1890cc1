package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The Grafana dashboard deploy/grafana/orderpipe.json: well formed, every
// query valid PromQL (promtool), and it shows what on-call needs. That every
// metric it queries is exported is checked in the root package
// (monitoring_e2e_test.go), which can start a pipeline.

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name    string `json:"name"`
			Type    string `json:"type"`
			Query   string `json:"query"`
			Current struct {
				Value string `json:"value"`
			} `json:"current"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func mustDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(mustRead(t, filepath.Join(root, "deploy", "grafana", "orderpipe.json")), &d); err != nil {
		t.Fatalf("deploy/grafana/orderpipe.json: %v", err)
	}
	return d
}

// all is every panel, rows' nested ones included.
func (d dashboard) all() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// defaultDatasource is the uid the datasource variable selects by default.
func (d dashboard) defaultDatasource() string {
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			return v.Current.Value
		}
	}
	return ""
}

func (d dashboard) exprs() []string {
	var out []string
	for _, p := range d.all() {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	return out
}

// TestGrafanaDashboard: the dashboard is well formed and shows what on-call
// needs to see (docs/oncall.md).
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	d := mustDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q title %q schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	if d.defaultDatasource() == "" {
		t.Error("no datasource variable of type prometheus with a default")
	}
	ids := map[int]bool{}
	for _, p := range d.all() {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W < 1 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not query the datasource variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q query %s is empty", p.Title, tg.RefID)
			}
		}
	}
	all := strings.Join(d.exprs(), "\n")
	for what, metric := range map[string]string{
		"intake by answer code":      "orderpipe:intake_requests:rate1m",
		"intake latency percentiles": "orderpipe:http_request_duration_seconds:p99_5m",
		"stock left per item":        "orderpipe_stock_remaining",
		"consumer lag":               "orderpipe:worker_consumer_lag_messages:max",
		"worker batch size":          "orderpipe:worker_batch_size:avg5m",
		"batch commit time":          "orderpipe_worker_batch_commit_seconds",
		"breakers":                   "orderpipe_breaker_state",
		"compensations":              "orderpipe_compensations_oldest_pending_seconds",
		"dead letters":               "orderpipe_worker_dlq_total",
		"reconciler drift":           "orderpipe_reconciler_drift",
		"status events published":    "orderpipe_status_events_published_total",
		"status outbox backlog":      "orderpipe_status_outbox_pending",
		"status outbox age":          "orderpipe_status_outbox_oldest_pending_seconds",
	} {
		if !strings.Contains(all, metric) {
			t.Errorf("the dashboard does not show %s (%s)", what, metric)
		}
	}
}

// TestGrafanaQueriesParse: every query of the dashboard is valid PromQL —
// promtool checks them as the expressions of a throwaway rule file.
func TestGrafanaQueriesParse(t *testing.T) {
	t.Parallel()
	exprs := mustDashboard(t).exprs()
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, err := json.Marshal(e) // a JSON string is a YAML string
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "      - record: dashboard:query:%d\n        expr: %s\n", i, q)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard-rules.yml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := promtool(t, dir, "check", "rules", "dashboard-rules.yml")
	if !strings.Contains(out, fmt.Sprintf("%d rules found", len(exprs))) {
		t.Errorf("promtool check rules:\n%s", out)
	}
}
