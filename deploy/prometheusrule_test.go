package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// The rules of deploy/prometheus/orderpipe-rules.yml ship twice: as the file
// compose's Prometheus loads, and as a PrometheusRule for prometheus-operator
// users (deploy/k8s/components/prometheus-operator). The file is the
// source; the PrometheusRule is generated from it:
//
//	make k8s-rules   (go test ./deploy/ -run TestPrometheusRuleMatchesRulesFile -update-rules)
var updateRules = flag.Bool("update-rules", false, "rewrite deploy/k8s/components/prometheus-operator/prometheusrule.yaml from deploy/prometheus/orderpipe-rules.yml")

const prometheusRuleFile = "k8s/components/prometheus-operator/prometheusrule.yaml"

// prometheusRule is the PrometheusRule the rules file makes.
func prometheusRule(t *testing.T) []byte {
	t.Helper()
	var groups struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.Unmarshal(mustRead(t, rulesFile), &groups); err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name":   "orderpipe",
			"labels": map[string]any{"app.kubernetes.io/name": "orderpipe"},
		},
		"spec": map[string]any{"groups": groups.Groups},
	}
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	head := "# GENERATED from deploy/prometheus/orderpipe-rules.yml by `make k8s-rules`; do not edit.\n" +
		"# deploy/prometheusrule_test.go fails when the two differ.\n"
	return append([]byte(head), b...)
}

// TestPrometheusRuleMatchesRulesFile: the PrometheusRule's spec.groups are
// the rules file's groups, rule for rule (compared parsed, so formatting
// does not matter); with -update-rules it rewrites the PrometheusRule.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	t.Parallel()
	if *updateRules {
		if err := os.WriteFile(filepath.FromSlash(prometheusRuleFile), prometheusRule(t), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var file struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.Unmarshal(mustRead(t, rulesFile), &file); err != nil {
		t.Fatal(err)
	}
	var pr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(mustRead(t, prometheusRuleFile), &pr); err != nil {
		t.Fatal(err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Fatalf("%s is a %s %s", prometheusRuleFile, pr.APIVersion, pr.Kind)
	}
	if len(file.Groups) == 0 {
		t.Fatal("the rules file has no groups")
	}
	if !reflect.DeepEqual(file.Groups, pr.Spec.Groups) {
		a, _ := json.MarshalIndent(file.Groups, "", " ")
		b, _ := json.MarshalIndent(pr.Spec.Groups, "", " ")
		t.Errorf("%s differs from %s: run `make k8s-rules`\n%s", prometheusRuleFile, rulesFile, firstDiff(a, b))
	}
	// The production overlay ships it, with the rules intact.
	for _, r := range mustOverlay(t, "production") {
		if r.Kind == "PrometheusRule" {
			var got struct {
				Spec struct {
					Groups []any `json:"groups"`
				} `json:"spec"`
			}
			yaml.Unmarshal(r.raw, &got)
			if !reflect.DeepEqual(got.Spec.Groups, file.Groups) {
				t.Error("the production overlay's PrometheusRule differs from the rules file")
			}
			return
		}
	}
	t.Error("the production overlay renders no PrometheusRule")
}

// firstDiff shows where two JSON texts part.
func firstDiff(a, b []byte) string {
	la, lb := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := 0; i < len(la) && i < len(lb); i++ {
		if !bytes.Equal(la[i], lb[i]) {
			return fmt.Sprintf("line %d: rules file: %s\n  PrometheusRule: %s", i+1, la[i], lb[i])
		}
	}
	return "one is a prefix of the other"
}

// TestServiceMonitorScrapesEveryComponent: in the production overlay the
// ServiceMonitor selects a Service of every long-running component, and
// each of those Services has a port the ServiceMonitor scrapes, on the
// container port the component serves /metrics on.
func TestServiceMonitorScrapesEveryComponent(t *testing.T) {
	t.Parallel()
	rs := mustOverlay(t, "production")
	objs := objects(rs)
	var sm serviceMonitor
	found := false
	for _, r := range rs {
		if r.Kind == "ServiceMonitor" {
			if err := yaml.Unmarshal(r.raw, &sm); err != nil {
				t.Fatal(err)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("the production overlay renders no ServiceMonitor")
	}
	matches := func(labels map[string]string) bool { return sm.selects(t, labels) }
	c := mustCode(t)
	for _, comp := range k8sComponents {
		d := find(objs, comp.kind, comp.name)
		if d == nil {
			t.Errorf("no %s", comp.name)
			continue
		}
		pod := mustWorkload(t, d).tmpl
		ct := pod.Spec.Containers[0]
		addrVar := "METRICS_ADDR"
		if comp.sub == "gateway" {
			addrVar = "HTTP_ADDR"
		}
		want := addrPort(t, envOr(ct.env(t, objs), addrVar, c.defaultOf(t, addrVar)))
		scraped := false
		for _, o := range objs {
			if o.Kind != "Service" || !matches(o.Metadata.Labels) {
				continue
			}
			var s struct {
				Selector map[string]string `json:"selector"`
				Ports    []struct {
					Name       string          `json:"name"`
					TargetPort json.RawMessage `json:"targetPort"`
				} `json:"ports"`
			}
			json.Unmarshal(o.Spec, &s)
			if !selects(s.Selector, pod.Metadata.Labels) {
				continue
			}
			for _, p := range s.Ports {
				for _, e := range sm.Spec.Endpoints {
					if e.Port == p.Name && e.Path == "/metrics" && resolvePort(t, ct, p.TargetPort) == want {
						scraped = true
					}
				}
			}
		}
		if !scraped {
			t.Errorf("%s: no Service the ServiceMonitor selects reaches /metrics on port %s (%s)", comp.name, want, addrVar)
		}
	}
}
