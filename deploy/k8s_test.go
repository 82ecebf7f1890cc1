package deploy

import (
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
	Data map[string]string `json:"data"` // a Secret's values are base64

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

func find(objs []object, kind, name string) *object {
	for i := range objs {
		if objs[i].Kind == kind && objs[i].Metadata.Name == name {
			return &objs[i]
		}
	}
	return nil
}

// findGenerated finds a ConfigMap or Secret a generator made from name: its
// name is name-<hash of its data>.
func findGenerated(objs []object, kind, name string) *object {
	for i := range objs {
		if objs[i].Kind == kind && strings.HasPrefix(objs[i].Metadata.Name, name+"-") &&
			len(objs[i].Metadata.Name) == len(name)+11 {
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
				t.Errorf("container %s: envFrom ConfigMap %s is not rendered", c.Name, ef.ConfigMapRef.Name)
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

// k8sComponents are the workloads of every overlay: object kind/name →
// subcommand. The schema migration is no workload of its own: it is the
// migrate init container of each Deployment (kustomize_test.go).
var k8sComponents = []struct {
	kind, name, sub string
}{
	{"Deployment", "orderpipe-gateway", "gateway"},
	{"Deployment", "orderpipe-worker", "worker"},
	{"Deployment", "orderpipe-closer", "closer"},
	{"Deployment", "orderpipe-reconciler", "reconciler"},
	{"Deployment", "orderpipe-relay", "relay"},
}

func TestManifestsExist(t *testing.T) {
	t.Parallel()
	for _, name := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			objs := objects(mustOverlay(t, name))
			for _, want := range []struct{ kind, name string }{
				{"Deployment", "orderpipe-gateway"}, {"Service", "orderpipe-gateway"}, {"HorizontalPodAutoscaler", "orderpipe-gateway"},
				{"Deployment", "orderpipe-worker"}, {"Deployment", "orderpipe-closer"}, {"Deployment", "orderpipe-reconciler"}, {"Deployment", "orderpipe-relay"},
				{"Namespace", "orderpipe"},
			} {
				if find(objs, want.kind, want.name) == nil {
					t.Errorf("no %s %s", want.kind, want.name)
				}
			}
			for _, o := range objs {
				if o.Kind == "Job" || o.Kind == "CronJob" {
					t.Errorf("%s %s: a Job's pod template is immutable; migrations run as init containers", o.Kind, o.Metadata.Name)
				}
			}
			if findGenerated(objs, "ConfigMap", "orderpipe-config") == nil {
				t.Error("no generated ConfigMap orderpipe-config-<hash>")
			}
			if findGenerated(objs, "Secret", "orderpipe-secrets") == nil {
				t.Error("no generated Secret orderpipe-secrets-<hash>")
			}
		})
	}
	// Every manifest of the base is in its kustomization.
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(root, "deploy", "k8s", "base", "kustomization.yaml")), &k); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "k8s", "base", "*.yaml"))
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(k.Resources, b) {
			t.Errorf("base/%s is not in base/kustomization.yaml's resources %v", b, k.Resources)
		}
	}
	// No real secret committed: each overlay's secrets/ ignores all but the
	// examples, and every example is an obvious placeholder.
	dirs, _ := filepath.Glob(filepath.Join(root, "deploy", "k8s", "overlays", "*", "secrets"))
	if len(dirs) < 2 {
		t.Fatalf("secrets directories %v", dirs)
	}
	for _, d := range dirs {
		ignore := string(mustRead(t, filepath.Join(d, ".gitignore")))
		if !strings.Contains(ignore, "\n*\n") || !strings.Contains(ignore, "!*.example") {
			t.Errorf("%s/.gitignore does not ignore everything but the examples:\n%s", d, ignore)
		}
		examples, _ := filepath.Glob(filepath.Join(d, "*.example"))
		for _, e := range examples {
			if !strings.Contains(string(mustRead(t, e)), "CHANGE-ME") {
				t.Errorf("%s holds no obvious placeholder", e)
			}
		}
	}
}

// TestManifestsMatchCode: args are real subcommands and flags, env names are
// in the config table, needed variables are given, secret files are
// mounted, probes hit the listeners, resources are bounded — for every
// container and init container of every overlay.
func TestManifestsMatchCode(t *testing.T) {
	t.Parallel()
	c := mustCode(t)
	for _, overlay := range overlays(t) {
		objs := objects(mustOverlay(t, overlay))
		for _, comp := range k8sComponents {
			o := find(objs, comp.kind, comp.name)
			if o == nil {
				continue
			}
			t.Run(overlay+"/"+comp.name, func(t *testing.T) {
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
				if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "migrate" {
					t.Errorf("init containers %d: want the migrate one", len(spec.InitContainers))
				}
				for i, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
					sub := comp.sub
					if i < len(spec.InitContainers) {
						sub = "migrate"
					}
					checkContainer(t, c, objs, spec, ct, sub)
				}
			})
		}
	}
}

func checkContainer(t *testing.T, c code, objs []object, spec podSpec, ct container, sub string) {
	t.Helper()
	if ct.Image == "" || len(ct.Command) > 0 {
		t.Errorf("%s: image %q command %v: want the orderpipe image with its entrypoint", ct.Name, ct.Image, ct.Command)
	}
	if len(ct.Args) == 0 || ct.Args[0] != sub {
		t.Errorf("%s: args %v, want %q first", ct.Name, ct.Args, sub)
	}
	for _, bad := range c.checkArgs(ct.Args) {
		t.Errorf("%s: %s", ct.Name, bad)
	}
	env := ct.env(t, objs)
	for _, k := range sortedKeys(env) {
		if !c.knownEnv(k) {
			t.Errorf("%s: sets %s, which the code does not read", ct.Name, k)
		}
	}
	for _, n := range needs[sub] {
		if !given(env, n) {
			t.Errorf("%s: needs %s (or %s_FILE)", ct.Name, n, n)
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"} {
		if env[k] == "" {
			t.Errorf("%s: %s not set", ct.Name, k)
		}
	}
	// Every *_FILE path is a key of a rendered Secret mounted in this container.
	for _, k := range sortedKeys(env) {
		if !strings.HasSuffix(k, "_FILE") && k != "OTEL_EXPORTER_OTLP_CERTIFICATE" {
			continue
		}
		if !secretFileMounted(objs, spec, ct, env[k]) {
			t.Errorf("%s: %s=%s is not a key of a Secret mounted in it", ct.Name, k, env[k])
		}
	}
	for _, r := range []string{"cpu", "memory"} {
		if ct.Resources.Requests[r] == "" || ct.Resources.Limits[r] == "" {
			t.Errorf("%s: resources %+v: want requests and limits for %s", ct.Name, ct.Resources, r)
		}
	}
	checkProbes(t, c, sub, ct, env)
}

// secretFileMounted reports whether path is a file of a Secret volume
// mounted in ct, and the rendered Secret has that key.
func secretFileMounted(objs []object, spec podSpec, ct container, path string) bool {
	for _, m := range ct.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			sec := find(objs, "Secret", v.Secret.SecretName)
			if sec == nil {
				return false
			}
			key := rel
			if len(v.Secret.Items) > 0 {
				key = ""
				for _, it := range v.Secret.Items {
					if it.Path == rel {
						key = it.Key
					}
				}
			}
			if _, ok := sec.Data[key]; ok && key != "" {
				return true
			}
		}
	}
	return false
}

// checkProbes: the gateway probes /readyz and /healthz on HTTP_ADDR's port,
// the other long-running components /healthz on METRICS_ADDR's port.
func checkProbes(t *testing.T, c code, sub string, ct container, env map[string]string) {
	t.Helper()
	if sub == "migrate" {
		return // runs to completion before the component starts
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
// loop (no --once) that Prometheus can scrape; the Services reach the ports
// of the pods they select.
func TestManifestsScaleOut(t *testing.T) {
	t.Parallel()
	for _, name := range overlays(t) {
		t.Run(name, func(t *testing.T) { checkScaleOut(t, objects(mustOverlay(t, name))) })
	}
}

func checkScaleOut(t *testing.T, objs []object) {
	cm := findGenerated(objs, "ConfigMap", "orderpipe-config")
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
	if o := find(objs, "Deployment", "orderpipe-reconciler"); o != nil {
		w := mustWorkload(t, o)
		if args := w.tmpl.Spec.Containers[0].Args; slices.Contains(args, "--once") {
			t.Errorf("reconciler args %v: a --once run exits before any scrape; the drift alerts need the loop", args)
		}
	} else {
		t.Error("no reconciler Deployment: the drift alerts could never fire")
	}
	// Each Service selects the pods of one Deployment and reaches ports
	// they have.
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
		var pod *podTemplate
		for i := range objs {
			if objs[i].Kind != "Deployment" {
				continue
			}
			w := mustWorkload(t, &objs[i])
			if len(s.Selector) > 0 && selects(s.Selector, w.tmpl.Metadata.Labels) {
				pod = &w.tmpl
			}
		}
		if pod == nil {
			t.Errorf("Service %s selector %v selects no Deployment's pods", o.Metadata.Name, s.Selector)
			continue
		}
		for _, p := range s.Ports {
			if got := resolvePort(t, pod.Spec.Containers[0], p.TargetPort); strings.HasPrefix(got, "(") {
				t.Errorf("Service %s targetPort %s: %s", o.Metadata.Name, p.TargetPort, got)
			}
		}
	}
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
