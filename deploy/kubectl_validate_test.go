package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"orderpipe/pkg/testenv"
)

// mustKubectlValidate finds kubectl-validate the way
// deploy/k8s/kubectl-validate.sh does (KUBECTL_VALIDATE, the PATH, its
// cache), without building (testenv.MustTool). `make test` runs the script
// first and passes its answer in KUBECTL_VALIDATE.
func mustKubectlValidate(t *testing.T) string {
	t.Helper()
	return testenv.MustTool(t, "KUBECTL_VALIDATE", "kubectl-validate", "bin/kubectl-validate", "deploy/k8s/kubectl-validate.sh")
}

// kubectlValidate runs kubectl-validate on objs, one file each, against the
// built-in schemas of Kubernetes 1.30 it embeds (no cluster, no network).
// Custom resources (prometheus-operator's) have no built-in schema and are
// left to TestPrometheusRuleMatchesRulesFile,
// TestServiceMonitorScrapesEveryComponent and
// TestPushgatewayScrapedWithHonorLabels.
func kubectlValidate(t *testing.T, bin string, objs []rendered) (string, error) {
	t.Helper()
	dir := t.TempDir()
	n := 0
	for _, r := range objs {
		if strings.Contains(r.APIVersion, "monitoring.coreos.com") {
			continue
		}
		// kustomize's secretGenerator wraps base64 values at 76 columns;
		// the API server's decoder skips the line breaks, the validator's
		// "byte" format does not: join them (the same bytes either way).
		raw := r.raw
		if r.Kind == "Secret" {
			var m map[string]any
			if err := yaml.Unmarshal(r.raw, &m); err != nil {
				t.Fatal(err)
			}
			if data, ok := m["data"].(map[string]any); ok {
				for k, v := range data {
					data[k] = strings.ReplaceAll(v.(string), "\n", "")
				}
			}
			var err error
			if raw, err = yaml.Marshal(m); err != nil {
				t.Fatal(err)
			}
		}
		name := filepath.Join(dir, strings.ToLower(r.Kind)+"-"+r.Metadata.Name+".yaml")
		if err := os.WriteFile(name, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("nothing to validate")
	}
	cmd := exec.Command(bin, "--version", "1.30", dir)
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent") // never a cluster's schemas
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestOverlaysPassKubectlValidate: every object of every overlay passes
// kubectl-validate, the API server's own validation.
func TestOverlaysPassKubectlValidate(t *testing.T) {
	t.Parallel()
	bin := mustKubectlValidate(t)
	for _, name := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			if out, err := kubectlValidate(t, bin, mustOverlay(t, name)); err != nil {
				t.Errorf("kubectl-validate: %v\n%s", err, out)
			}
		})
	}
}

// TestKubectlValidateRefusesAMisspeltField: the check above can fail — a
// Deployment with a misspelt field is refused.
func TestKubectlValidateRefusesAMisspeltField(t *testing.T) {
	t.Parallel()
	bin := mustKubectlValidate(t)
	var bad []rendered
	for _, r := range mustOverlay(t, "small") {
		if r.Kind == "Deployment" && r.Metadata.Name == "orderpipe-gateway" {
			r.raw = []byte(strings.Replace(string(r.raw), "replicas:", "replicaz:", 1))
			bad = append(bad, r)
		}
	}
	if len(bad) != 1 {
		t.Fatalf("no orderpipe-gateway Deployment in the small overlay")
	}
	if out, err := kubectlValidate(t, bin, bad); err == nil {
		t.Errorf("kubectl-validate took a Deployment with `replicaz`:\n%s", out)
	}
}
