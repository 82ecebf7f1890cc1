package deploy

import (
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The Kubernetes shape is deploy/k8s: a kustomize base, the overlays a user
// applies (`kubectl apply -k deploy/k8s/overlays/<name>`) and components
// they include. The tests render every overlay with kustomize's own Go API
// (what kubectl -k runs), validate each object against the Kubernetes
// OpenAPI schemas that kubectl-validate embeds (no cluster, no network), and
// then read the rendered objects (k8s_test.go, components_test.go).

// overlays are the directories under deploy/k8s/overlays, each rendered and
// checked; a new overlay is picked up without a change here.
func overlays(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "deploy", "k8s", "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	if !slices.Contains(out, "small") || !slices.Contains(out, "production") {
		t.Fatalf("overlays %v: want at least small and production", out)
	}
	return out
}

// k8sValidatedVersion is the Kubernetes release whose built-in schemas the
// objects are validated against (kubectl-validate embeds them).
const k8sValidatedVersion = "1.30"

// mustK8sTree copies deploy/k8s into an in-memory file system at /k8s, with
// every overlay's secrets/<name> made from secrets/<name>.example: the
// secretGenerators read files a user creates and never commits, and the
// tests must never read a developer's real ones.
func mustK8sTree(t *testing.T) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	src := filepath.Join(root, "deploy", "k8s")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		rel = filepath.ToSlash(rel)
		if path.Base(path.Dir(rel)) == "secrets" && !strings.HasSuffix(rel, ".example") {
			return nil // a real secret: not read
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel = strings.TrimSuffix(rel, ".example")
		return mem.WriteFile("/k8s/"+rel, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// rendered is one object of a kustomize build.
type rendered struct {
	object
	raw []byte         // the object as YAML, as kubectl would send it
	m   map[string]any // the object, generically
}

func (r rendered) id() string { return r.Kind + "/" + r.Metadata.Name }

// mustRender builds dir (a path in fs, e.g. /k8s/overlays/small).
func mustRender(t *testing.T, mem filesys.FileSystem, dir string) []rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(mem, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []rendered
	for _, res := range m.Resources() {
		raw, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var r rendered
		r.raw = raw
		if err := yaml.Unmarshal(raw, &r.object); err != nil {
			t.Fatalf("%s: %v", res.CurId(), err)
		}
		if err := yaml.Unmarshal(raw, &r.m); err != nil {
			t.Fatal(err)
		}
		r.file = dir
		out = append(out, r)
	}
	return out
}

var (
	renderMu    sync.Mutex
	renderCache = map[string][]rendered{}
)

// mustOverlay renders deploy/k8s/overlays/<name> once per test binary.
func mustOverlay(t *testing.T, name string) []rendered {
	t.Helper()
	renderMu.Lock()
	defer renderMu.Unlock()
	if r, ok := renderCache[name]; ok {
		return r
	}
	r := mustRender(t, mustK8sTree(t), "/k8s/overlays/"+name)
	renderCache[name] = r
	return r
}

// objects is a render as the manifest checks read it.
func objects(rs []rendered) []object {
	out := make([]object, len(rs))
	for i, r := range rs {
		out[i] = r.object
	}
	return out
}

// crdGroups are the API groups of custom resources: the built-in schemas do
// not know them, so they are checked by their own tests
// (prometheusrule_test.go: the PrometheusRule equals the rules file, the
// ServiceMonitor scrapes ports the Services have; k8s_test.go: it scrapes
// the Pushgateway with honorLabels).
var crdGroups = []string{"monitoring.coreos.com"}

// validate checks one object against the Kubernetes schema of its kind
// (schema_test.go): unknown or misspelt fields, wrong types, missing
// required fields, duplicate list keys, invalid names and label values.
func validate(t *testing.T, v *k8sSchemas, r rendered) error {
	t.Helper()
	group, _, _ := strings.Cut(r.APIVersion, "/")
	if slices.Contains(crdGroups, group) {
		return nil
	}
	if errs := v.validateObject(r.raw); len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// TestOverlaysValidate renders every overlay and validates every object
// against the Kubernetes schemas.
func TestOverlaysValidate(t *testing.T) {
	t.Parallel()
	v := mustSchemas(t)
	for _, name := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			rs := mustOverlay(t, name)
			if len(rs) < 10 {
				t.Fatalf("%d objects rendered", len(rs))
			}
			for _, r := range rs {
				if err := validate(t, v, r); err != nil {
					t.Errorf("%s: %v", r.id(), err)
				}
				if r.Kind != "Namespace" && r.m["metadata"].(map[string]any)["namespace"] != "orderpipe" {
					t.Errorf("%s is not in the orderpipe namespace", r.id())
				}
			}
		})
	}
}

// TestValidatorRejectsWhatTheAPIServerWould: the schema validation is real —
// a misspelt field, a wrong type and a missing required field are refused.
func TestValidatorRejectsWhatTheAPIServerWould(t *testing.T) {
	t.Parallel()
	v := mustSchemas(t)
	base := `apiVersion: apps/v1
kind: Deployment
metadata: {name: x, namespace: orderpipe}
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      containers:
        - name: x
          image: x
`
	ok := rendered{raw: []byte(base)}
	ok.APIVersion, ok.Kind = "apps/v1", "Deployment"
	if err := validate(t, v, ok); err != nil {
		t.Fatalf("a valid Deployment refused: %v", err)
	}
	for name, doc := range map[string]string{
		"MisspeltField":   strings.Replace(base, "image: x", "imagee: x", 1),
		"WrongType":       strings.Replace(base, "spec:\n  selector", "spec:\n  replicas: three\n  selector", 1),
		"MissingRequired": strings.Replace(base, "        - name: x\n", "        - \n", 1),
		"BadLabelValue":   strings.Replace(base, "labels: {app: x}", "labels: {app: \"x y\"}", 1),
		"DuplicateName":   base + "        - name: x\n          image: y\n",
		"BadName":         strings.Replace(base, "metadata: {name: x,", "metadata: {name: X_1,", 1),
		"UnknownTopLevel": base + "status2: {}\n",
	} {
		t.Run(name, func(t *testing.T) {
			r := rendered{raw: []byte(doc)}
			r.APIVersion, r.Kind = "apps/v1", "Deployment"
			if err := validate(t, v, r); err == nil {
				t.Errorf("accepted:\n%s", doc)
			}
		})
	}
}

// immutableFields are the fields the API server refuses to change on an
// existing object (a `kubectl apply` that would change them fails), by kind.
var immutableFields = map[string][][]string{
	"Deployment":            {{"spec", "selector"}},
	"ReplicaSet":            {{"spec", "selector"}},
	"DaemonSet":             {{"spec", "selector"}},
	"StatefulSet":           {{"spec", "selector"}, {"spec", "serviceName"}, {"spec", "volumeClaimTemplates"}, {"spec", "podManagementPolicy"}},
	"Job":                   {{"spec", "selector"}, {"spec", "template"}, {"spec", "completionMode"}},
	"Service":               {{"spec", "clusterIP"}, {"spec", "clusterIPs"}},
	"PersistentVolumeClaim": {{"spec", "storageClassName"}, {"spec", "accessModes"}, {"spec", "volumeName"}, {"spec", "selector"}},
	"StorageClass":          {{"provisioner"}, {"parameters"}, {"reclaimPolicy"}, {"volumeBindingMode"}},
}

// immutableChanges lists what applying next over prev would change that the
// API server refuses: the immutable fields of objects of the same kind,
// namespace and name, and the data of ConfigMaps and Secrets marked
// immutable.
func immutableChanges(prev, next []rendered) []string {
	byID := map[string]rendered{}
	for _, r := range prev {
		byID[r.id()+"@"+fmt.Sprint(r.m["metadata"].(map[string]any)["namespace"])] = r
	}
	var bad []string
	for _, n := range next {
		p, ok := byID[n.id()+"@"+fmt.Sprint(n.m["metadata"].(map[string]any)["namespace"])]
		if !ok {
			continue // a new object: created, not changed
		}
		fields := immutableFields[n.Kind]
		if n.Kind == "ConfigMap" || n.Kind == "Secret" {
			if n.m["immutable"] == true || p.m["immutable"] == true {
				fields = [][]string{{"data"}, {"binaryData"}, {"stringData"}}
			}
		}
		for _, f := range fields {
			a, b := dig(p.m, f), dig(n.m, f)
			if !reflect.DeepEqual(a, b) {
				bad = append(bad, fmt.Sprintf("%s: %s would change (%v → %v)", n.id(), strings.Join(f, "."), short(a), short(b)))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func dig(m map[string]any, p []string) any {
	var cur any = m
	for _, k := range p {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func short(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// upgradeTo writes an overlay of overlay that runs image tag tag (what a
// release pipeline does with `kustomize edit set image`), with extra
// kustomization lines, as variant, and renders it.
func upgradeTo(t *testing.T, mem filesys.FileSystem, overlay, variant, tag, extra string) []rendered {
	t.Helper()
	dir := "/k8s/upgrade-" + overlay + "-" + variant
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../overlays/%s
images:
  - name: registry.example.com/orderpipe
    newTag: %q
%s`, overlay, tag, extra)
	if err := mem.WriteFile(dir+"/kustomization.yaml", []byte(k)); err != nil {
		t.Fatal(err)
	}
	return mustRender(t, mem, dir)
}

// images are the images of every container and init container of a render.
func images(t *testing.T, rs []rendered) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, r := range rs {
		if !isWorkload(r.Kind) {
			continue
		}
		w := mustWorkload(t, &r.object)
		for _, c := range slices.Concat(w.tmpl.Spec.InitContainers, w.tmpl.Spec.Containers) {
			out[c.Image] = true
		}
	}
	return out
}

func isWorkload(kind string) bool {
	return kind == "Deployment" || kind == "StatefulSet" || kind == "Job" || kind == "CronJob"
}

// TestUpgradeTouchesNoImmutableField renders each overlay at two image tags
// — an upgrade — and checks that applying the second over the first changes
// no immutable field: the upgrade is one `kubectl apply -k`, on the first
// try, and the migrations come with it (the Deployments' migrate init
// containers run the new image's `orderpipe migrate` before each new pod's
// component starts; the reconciler's runs have none, and a run before the
// schema is migrated fails pushed and the next one succeeds). Third-party
// images (the Pushgateway) are pinned and stay as they are.
func TestUpgradeTouchesNoImmutableField(t *testing.T) {
	t.Parallel()
	mem := mustK8sTree(t)
	for _, name := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			v1 := upgradeTo(t, mem, name, "v1", "1.0.0", "")
			v2 := upgradeTo(t, mem, name, "v2", "1.1.0", "")
			ours := func(rs []rendered) (orderpipe, others map[string]bool) {
				orderpipe, others = map[string]bool{}, map[string]bool{}
				for im := range images(t, rs) {
					if isOrderpipeImage(im) {
						orderpipe[im] = true
					} else {
						others[im] = true
					}
				}
				return orderpipe, others
			}
			op2, others2 := ours(v2)
			_, others1 := ours(v1)
			if want := "registry.example.com/orderpipe:1.1.0"; !reflect.DeepEqual(op2, map[string]bool{want: true}) {
				t.Fatalf("orderpipe images after the upgrade %v, want only %s", op2, want)
			}
			if !reflect.DeepEqual(others1, others2) || len(others2) != len(k8sThirdParty) {
				t.Errorf("third-party images %v before the upgrade, %v after: want the %d pinned ones, unchanged", others1, others2, len(k8sThirdParty))
			}
			for _, bad := range immutableChanges(v1, v2) {
				t.Error(bad)
			}
			// Every workload's pod template changes (the pods roll); the
			// migrate init container runs the new image in each Deployment,
			// and the reconciler CronJob has none (k8s_test.go).
			prev := map[string]rendered{}
			for _, r := range v1 {
				prev[r.id()] = r
			}
			for _, r := range v2 {
				if !isWorkload(r.Kind) {
					continue
				}
				if _, ok := k8sThirdParty[r.id()]; ok {
					continue
				}
				w := mustWorkload(t, &r.object)
				if r.Kind != "Deployment" {
					if n := len(w.tmpl.Spec.InitContainers); n != 0 {
						t.Errorf("%s: %d init containers, want none: the Deployments migrate the schema", r.id(), n)
					}
					continue
				}
				if !slices.ContainsFunc(w.tmpl.Spec.InitContainers, func(c container) bool {
					return c.Name == "migrate" && slices.Equal(c.Args, []string{"migrate"}) && strings.HasSuffix(c.Image, ":1.1.0")
				}) {
					t.Errorf("%s: no migrate init container on the new image", r.id())
				}
			}
		})
	}
}

// TestImmutableCheckCatchesAFixedNameJob: the upgrade check finds what made
// the old manifests fail on the second day — a migrate Job of a fixed name
// whose pod template changes with the image — and a changed selector.
func TestImmutableCheckCatchesAFixedNameJob(t *testing.T) {
	t.Parallel()
	mem := mustK8sTree(t)
	job := `apiVersion: batch/v1
kind: Job
metadata:
  name: orderpipe-migrate
spec:
  template:
    spec:
      restartPolicy: OnFailure
      containers:
        - name: migrate
          image: orderpipe
          args: ["migrate"]
`
	if err := mem.WriteFile("/k8s/job/job.yaml", []byte(job)); err != nil {
		t.Fatal(err)
	}
	if err := mem.WriteFile("/k8s/job/kustomization.yaml", []byte("resources: [job.yaml]\nimages: [{name: orderpipe, newName: registry.example.com/orderpipe}]\n")); err != nil {
		t.Fatal(err)
	}
	render := func(tag string) []rendered {
		dir := "/k8s/job-" + tag
		k := fmt.Sprintf("resources: [../job]\nimages: [{name: registry.example.com/orderpipe, newTag: %q}]\n", tag)
		if err := mem.WriteFile(dir+"/kustomization.yaml", []byte(k)); err != nil {
			t.Fatal(err)
		}
		return mustRender(t, mem, dir)
	}
	if bad := immutableChanges(render("1.0.0"), render("1.1.0")); len(bad) != 1 || !strings.Contains(bad[0], "Job/orderpipe-migrate: spec.template") {
		t.Errorf("a fixed-name Job upgraded: found %v, want its spec.template", bad)
	}
	v1 := mustOverlay(t, "small")
	v2 := make([]rendered, len(v1))
	for i, r := range v1 {
		v2[i] = r
		if r.id() == "Deployment/orderpipe-worker" {
			var m map[string]any
			yaml.Unmarshal(r.raw, &m)
			m["spec"].(map[string]any)["selector"] = map[string]any{"matchLabels": map[string]any{"app": "other"}}
			v2[i].m = m
		}
	}
	if bad := immutableChanges(v1, v2); len(bad) != 1 || !strings.Contains(bad[0], "Deployment/orderpipe-worker: spec.selector") {
		t.Errorf("a changed selector: found %v", bad)
	}
}

// TestConfigChangeRollsPods: a changed setting is a new ConfigMap name, and
// every pod template names it, so `kubectl apply -k` rolls every component
// (a ConfigMap edited in place reaches no running process). The same for a
// changed secret.
func TestConfigChangeRollsPods(t *testing.T) {
	t.Parallel()
	mem := mustK8sTree(t)
	before := upgradeTo(t, mem, "small", "before", "1.0.0", "")
	after := upgradeTo(t, mem, "small", "after", "1.0.0", `configMapGenerator:
  - name: orderpipe-config
    behavior: merge
    literals: [CLOSER_INTERVAL=3s]
`)
	cmName := func(rs []rendered) string {
		for _, r := range rs {
			if r.Kind == "ConfigMap" && strings.HasPrefix(r.Metadata.Name, "orderpipe-config-") {
				return r.Metadata.Name
			}
		}
		t.Fatal("no generated orderpipe-config-<hash> ConfigMap")
		return ""
	}
	oldName, newName := cmName(before), cmName(after)
	if oldName == newName {
		t.Fatalf("ConfigMap name %s did not change with its data", oldName)
	}
	for _, r := range after {
		if !isWorkload(r.Kind) {
			continue
		}
		w := mustWorkload(t, &r.object)
		for _, c := range slices.Concat(w.tmpl.Spec.InitContainers, w.tmpl.Spec.Containers) {
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil && ef.ConfigMapRef.Name != newName {
					t.Errorf("%s container %s reads ConfigMap %s, want the new %s", r.id(), c.Name, ef.ConfigMapRef.Name, newName)
				}
			}
		}
	}
	for _, bad := range immutableChanges(before, after) {
		t.Error(bad)
	}
	// Secrets are generated too: their names carry a hash as well.
	for _, name := range overlays(t) {
		for _, r := range mustOverlay(t, name) {
			if r.Kind != "Secret" {
				continue
			}
			if i := strings.LastIndex(r.Metadata.Name, "-"); i < 0 || len(r.Metadata.Name)-i-1 != 10 {
				t.Errorf("%s: Secret %s has no content hash suffix: a changed secret would not roll the pods", name, r.Metadata.Name)
			}
		}
	}
}

// TestDisruptionBudgets: every long-running component (every Deployment,
// the Pushgateway's too) has a PodDisruptionBudget selecting exactly its
// pods, and none blocks a node drain for good (a budget that allows no
// eviction at the overlay's replicas would). Every budget selects a
// Deployment's pods: the reconciler CronJob's pods run a minute's pass and
// have none.
func TestDisruptionBudgets(t *testing.T) {
	t.Parallel()
	for _, name := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			rs := mustOverlay(t, name)
			objs := objects(rs)
			for _, o := range objs {
				if o.Kind != "Deployment" {
					continue
				}
				w := mustWorkload(t, &o)
				var pdb *object
				for i := range objs {
					if objs[i].Kind != "PodDisruptionBudget" {
						continue
					}
					var s struct {
						Selector struct {
							MatchLabels map[string]string `json:"matchLabels"`
						} `json:"selector"`
					}
					yaml.Unmarshal(objs[i].Spec, &s)
					if reflect.DeepEqual(s.Selector.MatchLabels, w.selector) {
						pdb = &objs[i]
					}
				}
				if pdb == nil {
					t.Errorf("Deployment %s has no PodDisruptionBudget selecting %v", o.Metadata.Name, w.selector)
					continue
				}
				var s struct {
					MinAvailable   any `json:"minAvailable"`
					MaxUnavailable any `json:"maxUnavailable"`
				}
				yaml.Unmarshal(pdb.Spec, &s)
				replicas := 1
				if w.replicas != nil {
					replicas = *w.replicas
				}
				if allowed := disruptionsAllowed(t, s.MinAvailable, s.MaxUnavailable, replicas); allowed < 1 {
					t.Errorf("PDB %s (minAvailable %v, maxUnavailable %v) allows no eviction of %d replicas: a node drain would hang",
						pdb.Metadata.Name, s.MinAvailable, s.MaxUnavailable, replicas)
				}
			}
			for _, p := range objs {
				if p.Kind != "PodDisruptionBudget" {
					continue
				}
				var s struct {
					Selector struct {
						MatchLabels map[string]string `json:"matchLabels"`
					} `json:"selector"`
				}
				yaml.Unmarshal(p.Spec, &s)
				if !slices.ContainsFunc(objs, func(o object) bool {
					return o.Kind == "Deployment" && reflect.DeepEqual(mustWorkload(t, &o).selector, s.Selector.MatchLabels)
				}) {
					t.Errorf("PDB %s selects %v, no Deployment's pods", p.Metadata.Name, s.Selector.MatchLabels)
				}
			}
		})
	}
}

// disruptionsAllowed is how many pods a PDB lets go at once with all
// replicas healthy (percentages round up, as the disruption controller does
// for minAvailable and maxUnavailable).
func disruptionsAllowed(t *testing.T, minAvail, maxUnavail any, replicas int) int {
	t.Helper()
	count := func(v any) int {
		switch v := v.(type) {
		case float64:
			return int(v)
		case string:
			var pct int
			if _, err := fmt.Sscanf(v, "%d%%", &pct); err != nil {
				t.Fatalf("PDB value %q", v)
			}
			return (replicas*pct + 99) / 100
		}
		t.Fatalf("PDB value %v (%T)", v, v)
		return 0
	}
	switch {
	case minAvail != nil:
		return replicas - count(minAvail)
	case maxUnavail != nil:
		return count(maxUnavail)
	}
	return replicas
}

// TestProductionReachesEveryDependencyOverTLS: the production overlay
// reaches Postgres, Redis (a Cluster), Kafka and the collector over TLS,
// verified against CAs from a mounted Secret, with every credential in a
// Secret file.
func TestProductionReachesEveryDependencyOverTLS(t *testing.T) {
	t.Parallel()
	objs := objects(mustOverlay(t, "production"))
	d := find(objs, "Deployment", "orderpipe-worker")
	if d == nil {
		t.Fatal("no worker")
	}
	w := mustWorkload(t, d)
	ct := w.tmpl.Spec.Containers[0]
	env := ct.env(t, objs)
	// secretFile is the content of the mounted Secret key a *_FILE names.
	secretFile := func(p string) string {
		t.Helper()
		for _, m := range ct.VolumeMounts {
			rel, ok := strings.CutPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")
			if !ok {
				continue
			}
			for _, v := range w.tmpl.Spec.Volumes {
				if v.Name != m.Name || v.Secret == nil {
					continue
				}
				key := rel
				for _, it := range v.Secret.Items {
					if it.Path == rel {
						key = it.Key
					}
				}
				if sec := find(objs, "Secret", v.Secret.SecretName); sec != nil {
					b, err := base64.StdEncoding.DecodeString(sec.Data[key])
					if err == nil && len(b) > 0 {
						return strings.TrimSpace(string(b))
					}
				}
			}
		}
		t.Errorf("%s is no key of a Secret mounted in the worker", p)
		return ""
	}
	if _, ok := env["REDIS_ADDR"]; ok {
		t.Error("REDIS_ADDR is set: with REDIS_URL the binary refuses to start")
	}
	redis, err := url.Parse(secretFile(env["REDIS_URL_FILE"]))
	if err != nil || redis.Scheme != "rediss" || len(strings.Split(redis.Host, ",")) < 3 || redis.User.Username() == "" {
		t.Errorf("redis_url %v: want rediss:// with an ACL user and at least three Cluster seed nodes (%v)", redis, err)
	}
	pg, err := url.Parse(secretFile(env["DATABASE_URL_FILE"]))
	if err != nil || pg.Query().Get("sslmode") != "verify-full" {
		t.Errorf("database_url %v: want sslmode=verify-full (%v)", pg, err)
	} else {
		secretFile(pg.Query().Get("sslrootcert"))
	}
	if env["KAFKA_TLS"] != "true" || env["KAFKA_SASL_MECHANISM"] == "" {
		t.Errorf("Kafka: KAFKA_TLS=%q KAFKA_SASL_MECHANISM=%q, want TLS and a SASL login", env["KAFKA_TLS"], env["KAFKA_SASL_MECHANISM"])
	}
	if !strings.HasPrefix(env["OTEL_EXPORTER_OTLP_ENDPOINT"], "https://") {
		t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT=%s, want https://", env["OTEL_EXPORTER_OTLP_ENDPOINT"])
	}
	for _, k := range []string{"REDIS_TLS_CA_FILE", "KAFKA_TLS_CA_FILE", "KAFKA_SASL_PASSWORD_FILE", "OTEL_EXPORTER_OTLP_CERTIFICATE"} {
		if env[k] == "" {
			t.Errorf("%s not set", k)
			continue
		}
		secretFile(env[k])
	}
}
