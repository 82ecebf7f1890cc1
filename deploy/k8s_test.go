package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The few Kubernetes fields the checks read; the rest of each object is
// ignored (the real API types would pull in k8s.io/api for no benefit).
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec json.RawMessage   `json:"spec"`
	Data map[string]string `json:"data"`

	file string
}

type podTemplate struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec podSpec `json:"spec"`
}

type podSpec struct {
	Containers      []container `json:"containers"`
	InitContainers  []container `json:"initContainers"`
	RestartPolicy   string      `json:"restartPolicy"`
	SecurityContext *struct {
		RunAsNonRoot *bool `json:"runAsNonRoot"`
	} `json:"securityContext"`
	Volumes []struct {
		Name   string `json:"name"`
		Secret *struct {
			SecretName string `json:"secretName"`
			Items      []struct {
				Key, Path string
			} `json:"items"`
		} `json:"secret"`
	} `json:"volumes"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
	Env     []struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct{ Name, Key string } `json:"secretKeyRef"`
		} `json:"valueFrom"`
	} `json:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct{ Name string } `json:"configMapRef"`
		SecretRef    *struct{ Name string } `json:"secretRef"`
	} `json:"envFrom"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	ReadinessProbe *probe `json:"readinessProbe"`
	LivenessProbe  *probe `json:"livenessProbe"`
	StartupProbe   *probe `json:"startupProbe"`
	Resources      struct {
		Requests map[string]string `json:"requests"`
		Limits   map[string]string `json:"limits"`
	} `json:"resources"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string          `json:"path"`
		Port json.RawMessage `json:"port"` // number or port name
	} `json:"httpGet"`
}

// mustManifests parses every YAML document under deploy/k8s.
func mustManifests(t *testing.T) []object {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "k8s", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no manifests under deploy/k8s")
	}
	var objs []object
	for _, f := range files {
		docs := bytes.Split(mustRead(t, f), []byte("\n---"))
		for i, doc := range docs {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var o object
			if err := yaml.Unmarshal(doc, &o); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			if o.Kind == "" || o.APIVersion == "" {
				t.Fatalf("%s document %d has no kind/apiVersion", f, i+1)
			}
			o.file = filepath.Base(f)
			objs = append(objs, o)
		}
	}
	return objs
}

func find(objs []object, kind, name string) *object {
	for i := range objs {
		if objs[i].Kind == kind && objs[i].Metadata.Name == name {
			return &objs[i]
		}
	}
	return nil
}

// workload is a pod template with where it comes from.
type workload struct {
	obj      *object
	replicas *int
	selector map[string]string
	tmpl     podTemplate
	schedule string
}

func mustWorkload(t *testing.T, o *object) workload {
	t.Helper()
	w := workload{obj: o}
	var err error
	switch o.Kind {
	case "Deployment", "StatefulSet":
		var s struct {
			Replicas *int `json:"replicas"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Template podTemplate `json:"template"`
		}
		err = json.Unmarshal(o.Spec, &s)
		w.replicas, w.selector, w.tmpl = s.Replicas, s.Selector.MatchLabels, s.Template
	case "Job":
		var s struct {
			Template podTemplate `json:"template"`
		}
		err = json.Unmarshal(o.Spec, &s)
		w.tmpl = s.Template
	case "CronJob":
		var s struct {
			Schedule    string `json:"schedule"`
			JobTemplate struct {
				Spec struct {
					Template podTemplate `json:"template"`
				} `json:"spec"`
			} `json:"jobTemplate"`
		}
		err = json.Unmarshal(o.Spec, &s)
		w.tmpl, w.schedule = s.JobTemplate.Spec.Template, s.Schedule
	default:
		t.Fatalf("%s is not a workload", o.Kind)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Metadata.Name, err)
	}
	return w
}

// env is what a container sees: ConfigMap data via envFrom, then env.
func (c container) env(t *testing.T, objs []object) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			cm := find(objs, "ConfigMap", ef.ConfigMapRef.Name)
			if cm == nil {
				t.Errorf("container %s: envFrom ConfigMap %s is not in deploy/k8s", c.Name, ef.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				out[k] = v
			}
		}
		if ef.SecretRef != nil {
			t.Errorf("container %s: envFrom a Secret puts secrets in the environment; mount it and use *_FILE", c.Name)
		}
	}
	for _, e := range c.Env {
		out[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out[e.Name] = "(secret)"
		}
	}
	return out
}

// components of the manifests: object kind/name → subcommand.
var k8sComponents = []struct {
	kind, name, sub string
}{
	{"Deployment", "orderpipe-gateway", "gateway"},
	{"Deployment", "orderpipe-worker", "worker"},
	{"Deployment", "orderpipe-closer", "closer"},
	{"Deployment", "orderpipe-relay", "relay"},
	{"CronJob", "orderpipe-reconciler", "reconciler"},
	{"Job", "orderpipe-migrate", "migrate"},
}

func TestManifestsExist(t *testing.T) {
	objs := mustManifests(t)
	for _, want := range []struct{ kind, name string }{
		{"Deployment", "orderpipe-gateway"}, {"Service", "orderpipe-gateway"}, {"HorizontalPodAutoscaler", "orderpipe-gateway"},
		{"Deployment", "orderpipe-worker"}, {"Deployment", "orderpipe-closer"}, {"Deployment", "orderpipe-relay"},
		{"CronJob", "orderpipe-reconciler"}, {"Job", "orderpipe-migrate"}, {"ConfigMap", "orderpipe-config"},
	} {
		if find(objs, want.kind, want.name) == nil {
			t.Errorf("no %s %s", want.kind, want.name)
		}
	}
	// kustomization.yaml lists every manifest but the example Secret.
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(root, "deploy", "k8s", "kustomization.yaml")), &k); err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for _, o := range objs {
		if o.Kind != "Kustomization" {
			files[o.file] = true
		}
	}
	for f := range files {
		if listed := slices.Contains(k.Resources, f); listed == (f == "secret.example.yaml") {
			t.Errorf("kustomization resources %v: %s listed=%v", k.Resources, f, listed)
		}
	}
	for _, r := range k.Resources {
		if !files[r] {
			t.Errorf("kustomization lists %s, which does not exist", r)
		}
	}
	// No real secret committed: Secrets only in the example, with placeholders.
	for _, o := range objs {
		if o.Kind == "Secret" && o.file != "secret.example.yaml" {
			t.Errorf("%s commits a Secret %s", o.file, o.Metadata.Name)
		}
	}
	example := string(mustRead(t, filepath.Join(root, "deploy", "k8s", "secret.example.yaml")))
	if !strings.Contains(example, "CHANGE-ME") {
		t.Error("secret.example.yaml holds no obvious placeholder")
	}
}

// TestManifestsMatchCode: args are real subcommands and flags, env names are
// in the config table, needed variables are given, secret files are
// mounted, probes hit the listeners, resources are bounded.
func TestManifestsMatchCode(t *testing.T) {
	objs := mustManifests(t)
	c := mustCode(t)
	for _, comp := range k8sComponents {
		o := find(objs, comp.kind, comp.name)
		if o == nil {
			continue
		}
		t.Run(comp.name, func(t *testing.T) {
			w := mustWorkload(t, o)
			spec := w.tmpl.Spec
			if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
				t.Error("pod securityContext.runAsNonRoot is not true")
			}
			if w.selector != nil {
				for k, v := range w.selector {
					if w.tmpl.Metadata.Labels[k] != v {
						t.Errorf("selector %v does not match template labels %v", w.selector, w.tmpl.Metadata.Labels)
					}
				}
			}
			if len(spec.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(spec.Containers))
			}
			ct := spec.Containers[0]
			if ct.Image == "" || len(ct.Command) > 0 {
				t.Errorf("image %q command %v: want the orderpipe image with its entrypoint", ct.Image, ct.Command)
			}
			if len(ct.Args) == 0 || ct.Args[0] != comp.sub {
				t.Errorf("args %v, want %q first", ct.Args, comp.sub)
			}
			for _, bad := range c.checkArgs(ct.Args) {
				t.Error(bad)
			}
			env := ct.env(t, objs)
			for _, k := range sortedKeys(env) {
				if !c.knownEnv(k) {
					t.Errorf("sets %s, which the code does not read", k)
				}
			}
			for _, n := range needs[comp.sub] {
				if !given(env, n) {
					t.Errorf("needs %s (or %s_FILE)", n, n)
				}
			}
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"} {
				if env[k] == "" {
					t.Errorf("%s not set", k)
				}
			}
			// Every *_FILE path lies in a mounted Secret volume that has the file.
			for k, path := range env {
				if !strings.HasSuffix(k, "_FILE") {
					continue
				}
				if !secretFileMounted(spec, ct, path) {
					t.Errorf("%s=%s is not a file of a mounted Secret volume", k, path)
				}
			}
			for _, r := range []string{"cpu", "memory"} {
				if ct.Resources.Requests[r] == "" || ct.Resources.Limits[r] == "" {
					t.Errorf("resources %+v: want requests and limits for %s", ct.Resources, r)
				}
			}
			checkProbes(t, c, comp.sub, ct, env)
		})
	}
}

func secretFileMounted(spec podSpec, ct container, path string) bool {
	for _, m := range ct.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			if len(v.Secret.Items) == 0 {
				return true // every key of the Secret is a file
			}
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					return true
				}
			}
		}
	}
	return false
}

// checkProbes: the gateway probes /readyz and /healthz on HTTP_ADDR's port,
// the other long-running components /healthz on METRICS_ADDR's port.
func checkProbes(t *testing.T, c code, sub string, ct container, env map[string]string) {
	t.Helper()
	if sub == "migrate" || sub == "reconciler" {
		return // run-to-completion jobs
	}
	addrVar := "METRICS_ADDR"
	want := map[string]string{"readiness": "/healthz", "liveness": "/healthz"}
	if sub == "gateway" {
		addrVar = "HTTP_ADDR"
		want = map[string]string{"readiness": "/readyz", "liveness": "/healthz"}
	}
	port := addrPort(t, envOr(env, addrVar, c.defaultOf(t, addrVar)))
	probes := map[string]*probe{"readiness": ct.ReadinessProbe, "liveness": ct.LivenessProbe, "startup": ct.StartupProbe}
	for kind, p := range probes {
		path, required := want[kind]
		if p == nil {
			if required {
				t.Errorf("no %s probe", kind)
			}
			continue
		}
		if p.HTTPGet == nil {
			t.Errorf("%s probe is not httpGet", kind)
			continue
		}
		if required && p.HTTPGet.Path != path {
			t.Errorf("%s probe path %s, want %s", kind, p.HTTPGet.Path, path)
		}
		if got := resolvePort(t, ct, p.HTTPGet.Port); got != port {
			t.Errorf("%s probe on port %s, but %s listens on %s (%s)", kind, got, sub, port, addrVar)
		}
	}
}

// resolvePort turns a probe port (number or container port name) into a number.
func resolvePort(t *testing.T, ct container, raw json.RawMessage) string {
	t.Helper()
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		return strconv.Itoa(n)
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		t.Fatalf("probe port %s", raw)
	}
	for _, p := range ct.Ports {
		if p.Name == name {
			return strconv.Itoa(p.ContainerPort)
		}
	}
	return fmt.Sprintf("(no container port named %q)", name)
}

// TestManifestsScaleOut: worker replicas never exceed the partitions; the
// closer runs two replicas; the HPA targets the gateway; the reconciler is a
// one-pass CronJob that never overlaps; the Services reach the gateway ports.
func TestManifestsScaleOut(t *testing.T) {
	objs := mustManifests(t)
	cm := find(objs, "ConfigMap", "orderpipe-config")
	if cm == nil {
		t.Fatal("no ConfigMap orderpipe-config")
	}
	parts, err := strconv.Atoi(cm.Data["KAFKA_PARTITIONS"])
	if err != nil || parts < 1 {
		t.Fatalf("ConfigMap KAFKA_PARTITIONS=%q", cm.Data["KAFKA_PARTITIONS"])
	}
	if o := find(objs, "Deployment", "orderpipe-worker"); o != nil {
		w := mustWorkload(t, o)
		if w.replicas == nil {
			t.Error("worker replicas not set: say how many, at most the partitions")
		} else if *w.replicas > parts {
			t.Errorf("worker replicas %d > %d partitions: the extra consumers would sit idle", *w.replicas, parts)
		}
	}
	for _, o := range objs {
		if o.Kind != "HorizontalPodAutoscaler" {
			continue
		}
		var s struct {
			ScaleTargetRef struct{ Kind, Name string } `json:"scaleTargetRef"`
			MinReplicas    int                         `json:"minReplicas"`
			MaxReplicas    int                         `json:"maxReplicas"`
		}
		if err := json.Unmarshal(o.Spec, &s); err != nil {
			t.Fatal(err)
		}
		if find(objs, s.ScaleTargetRef.Kind, s.ScaleTargetRef.Name) == nil {
			t.Errorf("HPA %s targets missing %s %s", o.Metadata.Name, s.ScaleTargetRef.Kind, s.ScaleTargetRef.Name)
		}
		if s.ScaleTargetRef.Name == "orderpipe-worker" && s.MaxReplicas > parts {
			t.Errorf("worker HPA maxReplicas %d > %d partitions", s.MaxReplicas, parts)
		}
		if s.MinReplicas < 1 || s.MaxReplicas < s.MinReplicas {
			t.Errorf("HPA %s min %d max %d", o.Metadata.Name, s.MinReplicas, s.MaxReplicas)
		}
	}
	if o := find(objs, "Deployment", "orderpipe-closer"); o != nil {
		if w := mustWorkload(t, o); w.replicas == nil || *w.replicas != 2 {
			t.Errorf("closer replicas not 2 (%v)", w.replicas != nil)
		}
	}
	if o := find(objs, "CronJob", "orderpipe-reconciler"); o != nil {
		w := mustWorkload(t, o)
		var s struct {
			ConcurrencyPolicy string `json:"concurrencyPolicy"`
		}
		json.Unmarshal(o.Spec, &s)
		if !slices.Contains(w.tmpl.Spec.Containers[0].Args, "--once") || w.schedule == "" || s.ConcurrencyPolicy != "Forbid" {
			t.Errorf("reconciler CronJob: args %v schedule %q concurrency %q; want --once, a schedule, Forbid",
				w.tmpl.Spec.Containers[0].Args, w.schedule, s.ConcurrencyPolicy)
		}
	}
	gw := find(objs, "Deployment", "orderpipe-gateway")
	if gw == nil {
		return
	}
	pod := mustWorkload(t, gw).tmpl
	for _, o := range objs {
		if o.Kind != "Service" {
			continue
		}
		var s struct {
			Selector map[string]string `json:"selector"`
			Ports    []struct {
				TargetPort json.RawMessage `json:"targetPort"`
			} `json:"ports"`
		}
		if err := json.Unmarshal(o.Spec, &s); err != nil {
			t.Fatal(err)
		}
		for k, v := range s.Selector {
			if pod.Metadata.Labels[k] != v {
				t.Errorf("Service %s selector %v does not select the gateway pods %v", o.Metadata.Name, s.Selector, pod.Metadata.Labels)
			}
		}
		for _, p := range s.Ports {
			if got := resolvePort(t, pod.Spec.Containers[0], p.TargetPort); strings.HasPrefix(got, "(") {
				t.Errorf("Service %s targetPort %s: %s", o.Metadata.Name, p.TargetPort, got)
			}
		}
	}
}
