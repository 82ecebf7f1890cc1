package deploy

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
	Containers                    []container `json:"containers"`
	InitContainers                []container `json:"initContainers"`
	RestartPolicy                 string      `json:"restartPolicy"`
	TerminationGracePeriodSeconds *int        `json:"terminationGracePeriodSeconds"`
	SecurityContext               *struct {
		RunAsNonRoot   *bool `json:"runAsNonRoot"`
		RunAsUser      *int  `json:"runAsUser"`
		SeccompProfile *struct {
			Type string `json:"type"`
		} `json:"seccompProfile"`
	} `json:"securityContext"`
	Volumes []struct {
		Name   string `json:"name"`
		Secret *struct {
			SecretName string `json:"secretName"`
			Items      []struct {
				Key, Path string
			} `json:"items"`
		} `json:"secret"`
		EmptyDir *struct{} `json:"emptyDir"`
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
	SecurityContext *struct {
		AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `json:"readOnlyRootFilesystem"`
		Capabilities             *struct {
			Drop []string `json:"drop"`
		} `json:"capabilities"`
	} `json:"securityContext"`
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

func mustWorkload(t testing.TB, o *object) workload {
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
func (c container) env(t testing.TB, objs []object) map[string]string {
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

// k8sWorkload is an orderpipe workload of every overlay: object kind/name →
// subcommand.
type k8sWorkload struct {
	kind, name, sub string
}

// k8sComponents are the long-running orderpipe workloads: Deployments that
// serve /metrics, each behind a Service the ServiceMonitor scrapes. The
// schema migration is no workload of its own: it is the migrate init
// container of each of them (TestManifestsMatchCode, kustomize_test.go).
var k8sComponents = []k8sWorkload{
	{"Deployment", "orderpipe-gateway", "gateway"},
	{"Deployment", "orderpipe-worker", "worker"},
	{"Deployment", "orderpipe-closer", "closer"},
	{"Deployment", "orderpipe-relay", "relay"},
	{"Deployment", "orderpipe-webhook", "webhook"},
}

// k8sScheduled are the orderpipe workloads that run to completion on a
// schedule: they serve nothing, push their metrics to the Pushgateway and
// run no migrate init container (checkReconcilerCronJob says why).
var k8sScheduled = []k8sWorkload{
	{"CronJob", "orderpipe-reconciler", "reconciler"},
}

// k8sThirdParty are the workloads of every overlay that run no orderpipe
// image: kind/name → image repository.
var k8sThirdParty = map[string]string{
	"Deployment/orderpipe-pushgateway": "prom/pushgateway",
}

// isOrderpipeImage reports whether image is the orderpipe image (the base's
// `images:` names it registry.example.com/orderpipe:<tag>).
func isOrderpipeImage(image string) bool {
	repo, _ := imageRepoTag(image)
	return repo == "orderpipe" || strings.HasSuffix(repo, "/orderpipe")
}

// imageRepoTag splits an image reference into its repository and its tag
// (or @digest); the tag is "" when none is given.
func imageRepoTag(image string) (repo, tag string) {
	if i := strings.Index(image, "@"); i >= 0 {
		return image[:i], image[i:]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, ""
}

func TestManifestsExist(t *testing.T) {
	t.Parallel()
	for _, name := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			objs := objects(mustOverlay(t, name))
			for _, want := range []struct{ kind, name string }{
				{"Deployment", "orderpipe-gateway"}, {"Service", "orderpipe-gateway"}, {"HorizontalPodAutoscaler", "orderpipe-gateway"},
				{"Deployment", "orderpipe-worker"}, {"Deployment", "orderpipe-closer"}, {"Deployment", "orderpipe-relay"},
				{"Deployment", "orderpipe-webhook"}, {"CronJob", "orderpipe-reconciler"},
				{"Deployment", "orderpipe-pushgateway"}, {"Service", "orderpipe-pushgateway"},
				{"Namespace", "orderpipe"},
			} {
				if find(objs, want.kind, want.name) == nil {
					t.Errorf("no %s %s", want.kind, want.name)
				}
			}
			// The reconciler runs as the CronJob only: no loop beside it, and
			// nothing left of the loop's shape (its Service named a metrics
			// port nothing serves; its budget guarded no pod).
			for _, kind := range []string{"Deployment", "StatefulSet", "Service", "PodDisruptionBudget"} {
				if find(objs, kind, "orderpipe-reconciler") != nil {
					t.Errorf("%s orderpipe-reconciler: the reconciler is the CronJob", kind)
				}
			}
			for _, o := range objs {
				// A CronJob is fine: its jobTemplate may change on apply,
				// each run is a new Job made from it.
				if o.Kind == "Job" {
					t.Errorf("%s %s: a Job's pod template is immutable; migrations run as init containers", o.Kind, o.Metadata.Name)
				}
			}
			// Every workload is a declared orderpipe one or a declared
			// third-party one.
			declared := map[string]bool{}
			for _, w := range slices.Concat(k8sComponents, k8sScheduled) {
				declared[w.kind+"/"+w.name] = true
			}
			for _, o := range objs {
				if !isWorkload(o.Kind) {
					continue
				}
				id := o.Kind + "/" + o.Metadata.Name
				if _, ok := k8sThirdParty[id]; !ok && !declared[id] {
					t.Errorf("%s is neither in k8sComponents, k8sScheduled nor k8sThirdParty", id)
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
	// examples, and every example is an obvious placeholder or empty (a
	// feature off by default: webhook_secret without WEBHOOK_URLS, where a
	// placeholder would be a bad secret the deliverer refuses).
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
			if b := string(mustRead(t, e)); b != "" && !strings.Contains(b, "CHANGE-ME") {
				t.Errorf("%s holds no obvious placeholder", e)
			}
		}
	}
}

// TestManifestsMatchCode: args are real subcommands and flags, env names are
// in the config table, needed variables are given, secret files are
// mounted, probes hit the listeners (and a scheduled run has neither ports
// nor probes), resources are bounded — for every container and init
// container of every orderpipe workload, the CronJob's pod included, of
// every overlay. Each Deployment's pod starts with the migrate init
// container; the CronJob's has no init container.
func TestManifestsMatchCode(t *testing.T) {
	t.Parallel()
	c := mustCode(t)
	for _, overlay := range overlays(t) {
		objs := objects(mustOverlay(t, overlay))
		for _, comp := range slices.Concat(k8sComponents, k8sScheduled) {
			o := find(objs, comp.kind, comp.name)
			if o == nil {
				t.Errorf("%s: no %s %s", overlay, comp.kind, comp.name)
				continue
			}
			scheduled := slices.Contains(k8sScheduled, comp)
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
				switch {
				case scheduled && len(spec.InitContainers) != 0:
					t.Errorf("init containers %d: want none on a scheduled run (the Deployments migrate the schema)", len(spec.InitContainers))
				case !scheduled && (len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "migrate"):
					t.Errorf("init containers %d: want the migrate one", len(spec.InitContainers))
				}
				for i, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
					sub := comp.sub
					if i < len(spec.InitContainers) {
						sub = "migrate"
					}
					checkContainer(t, c, objs, spec, ct, sub, scheduled)
				}
			})
		}
	}
}

func checkContainer(t *testing.T, c code, objs []object, spec podSpec, ct container, sub string, scheduled bool) {
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
	checkProbes(t, c, sub, ct, env, scheduled)
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
// the other long-running components /healthz on METRICS_ADDR's port; a
// scheduled run (reconciler --once) listens on nothing, so it has neither
// ports nor probes.
func checkProbes(t *testing.T, c code, sub string, ct container, env map[string]string, scheduled bool) {
	t.Helper()
	if sub == "migrate" {
		return // runs to completion before the component starts
	}
	if scheduled {
		if len(ct.Ports) > 0 || ct.ReadinessProbe != nil || ct.LivenessProbe != nil || ct.StartupProbe != nil {
			t.Errorf("%s: ports %v and probes: a scheduled run listens on nothing (its metrics are pushed)", ct.Name, ct.Ports)
		}
		return
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
func resolvePort(t testing.TB, ct container, raw json.RawMessage) string {
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
// CronJob of one --once --fix pass per RECONCILE_INTERVAL, with no init
// container, that pushes its metrics to the Pushgateway's Service; the
// Services reach the ports of the pods they select.
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
	checkReconcilerCronJob(t, objs)
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

// checkReconcilerCronJob: the reconciler is a CronJob running one
// `reconciler --once --fix` pass per RECONCILE_INTERVAL (the schedule's
// period is the interval OrderpipeReconcileOverdue reads), never two passes
// at once, no retry but the next run, a hung pass ended before it holds
// back the next run, each pass's metrics pushed to the Pushgateway's
// Service (a --once pod exits before any scrape), and no init container: a
// migrate that cannot reach Postgres fails the Job before the pass runs, so
// nothing is pushed and OrderpipeReconcilerFailing stays silent, and it
// would use the migration's DDL rights every minute and most of the
// deadline. The Deployments' migrate init containers migrate the schema.
func checkReconcilerCronJob(t testing.TB, objs []object) {
	t.Helper()
	o := find(objs, "CronJob", "orderpipe-reconciler")
	if o == nil {
		t.Error("no reconciler CronJob: the drift alerts could never fire")
		return
	}
	var cj struct {
		Schedule                   string `json:"schedule"`
		Suspend                    *bool  `json:"suspend"`
		ConcurrencyPolicy          string `json:"concurrencyPolicy"`
		StartingDeadlineSeconds    *int   `json:"startingDeadlineSeconds"`
		SuccessfulJobsHistoryLimit *int   `json:"successfulJobsHistoryLimit"`
		FailedJobsHistoryLimit     *int   `json:"failedJobsHistoryLimit"`
		JobTemplate                struct {
			Spec struct {
				BackoffLimit          *int `json:"backoffLimit"`
				ActiveDeadlineSeconds *int `json:"activeDeadlineSeconds"`
			} `json:"spec"`
		} `json:"jobTemplate"`
	}
	if err := json.Unmarshal(o.Spec, &cj); err != nil {
		t.Fatal(err)
	}
	spec := mustWorkload(t, o).tmpl.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("reconciler CronJob: want one container, got %d", len(spec.Containers))
	}
	for _, ic := range spec.InitContainers {
		t.Errorf("reconciler init container %s %v: want none — one that fails (migrate without Postgres) fails the run unpushed, so OrderpipeReconcilerFailing never fires; the Deployments migrate the schema", ic.Name, ic.Args)
	}
	ct := spec.Containers[0]
	if want := []string{"reconciler", "--once", "--fix"}; !slices.Equal(ct.Args, want) {
		t.Errorf("reconciler args %v, want %v: one pass per run (the loop never ends its Job), repairing the drift it finds", ct.Args, want)
	}
	env := ct.env(t, objs)
	interval, err := time.ParseDuration(envOr(env, "RECONCILE_INTERVAL", mustCode(t).defaultOf(t, "RECONCILE_INTERVAL")))
	if err != nil || interval <= 0 {
		t.Fatalf("reconciler RECONCILE_INTERVAL=%q: %v", env["RECONCILE_INTERVAL"], err)
	}
	if period, ok := cronPeriod(cj.Schedule); !ok {
		t.Errorf("reconciler schedule %q: no fixed period this test can read", cj.Schedule)
	} else if period != interval {
		t.Errorf("reconciler schedule %q runs every %v, but RECONCILE_INTERVAL=%v: OrderpipeReconcileOverdue compares the pushed last success with three RECONCILE_INTERVALs, so they must agree",
			cj.Schedule, period, interval)
	}
	if cj.Suspend != nil && *cj.Suspend {
		t.Error("reconciler CronJob is suspended")
	}
	if cj.ConcurrencyPolicy != "Forbid" {
		t.Errorf("reconciler concurrencyPolicy %q, want Forbid: a pass that overruns its interval makes the next wait", cj.ConcurrencyPolicy)
	}
	if d := cj.StartingDeadlineSeconds; d == nil || *d <= 0 || time.Duration(*d)*time.Second >= interval {
		t.Errorf("reconciler startingDeadlineSeconds %v, want set and under RECONCILE_INTERVAL %v: a run missed is skipped, not made up in a burst", deref(d), interval)
	}
	for name, n := range map[string]*int{"successfulJobsHistoryLimit": cj.SuccessfulJobsHistoryLimit, "failedJobsHistoryLimit": cj.FailedJobsHistoryLimit} {
		if n == nil || *n > 5 {
			t.Errorf("reconciler %s %v, want set and small: one Job (and pod) a minute piles up", name, deref(n))
		}
	}
	if b := cj.JobTemplate.Spec.BackoffLimit; b == nil || *b != 0 {
		t.Errorf("reconciler backoffLimit %v, want 0: the next scheduled run is the retry", deref(b))
	}
	if spec.RestartPolicy != "Never" {
		t.Errorf("reconciler restartPolicy %q, want Never: no retry in place beside the next run", spec.RestartPolicy)
	}
	grace := 30 // the API's default
	if spec.TerminationGracePeriodSeconds != nil {
		grace = *spec.TerminationGracePeriodSeconds
	}
	switch ad := cj.JobTemplate.Spec.ActiveDeadlineSeconds; {
	case ad == nil:
		t.Error("reconciler activeDeadlineSeconds not set: a hung pass would hold back every later run (Forbid)")
	case *ad < 30:
		t.Errorf("reconciler activeDeadlineSeconds %d: too short for a pass over many items", *ad)
	case time.Duration(*ad+grace)*time.Second >= interval:
		t.Errorf("reconciler activeDeadlineSeconds %d + %d s of grace ≥ RECONCILE_INTERVAL %v: a hung pass would hold back the next run", *ad, grace, interval)
	}
	checkPushTarget(t, objs, env["PUSHGATEWAY_URL"])
}

func deref(p *int) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// checkPushTarget: PUSHGATEWAY_URL is http://<Service>:<port> of the
// orderpipe-pushgateway Service in the namespace, that Service selects the
// Pushgateway's pods, and its port reaches the container port the
// Pushgateway listens and is probed on. One replica (pushes spread over
// several would leave each with a different last pass), its metrics kept in
// an emptyDir across container restarts.
func checkPushTarget(t testing.TB, objs []object, raw string) {
	t.Helper()
	u, err := url.Parse(raw)
	if raw == "" || err != nil || u.Scheme != "http" || u.Port() == "" || strings.Trim(u.Path, "/") != "" {
		t.Errorf("reconciler PUSHGATEWAY_URL=%q (%v): want http://orderpipe-pushgateway:<its Service port>", raw, err)
		return
	}
	host := strings.Split(u.Hostname(), ".")
	if len(host) > 1 && host[1] != "orderpipe" {
		t.Errorf("PUSHGATEWAY_URL=%s: not the orderpipe namespace", raw)
	}
	if host[0] != "orderpipe-pushgateway" {
		t.Errorf("PUSHGATEWAY_URL=%s: want the orderpipe-pushgateway Service", raw)
	}
	svc := find(objs, "Service", host[0])
	if svc == nil {
		t.Errorf("PUSHGATEWAY_URL=%s names no Service", raw)
		return
	}
	d := find(objs, "Deployment", "orderpipe-pushgateway")
	if d == nil {
		t.Error("no Deployment orderpipe-pushgateway")
		return
	}
	w := mustWorkload(t, d)
	if w.replicas != nil && *w.replicas != 1 {
		t.Errorf("Pushgateway replicas %d, want 1: pushes spread over several would leave each with another last pass", *w.replicas)
	}
	if len(w.tmpl.Spec.Containers) != 1 {
		t.Fatalf("Pushgateway: want one container, got %d", len(w.tmpl.Spec.Containers))
	}
	ct := w.tmpl.Spec.Containers[0]
	if repo, _ := imageRepoTag(ct.Image); repo != k8sThirdParty["Deployment/orderpipe-pushgateway"] {
		t.Errorf("Pushgateway image %s, want %s", ct.Image, k8sThirdParty["Deployment/orderpipe-pushgateway"])
	}
	var s struct {
		Selector map[string]string `json:"selector"`
		Ports    []struct {
			Name       string          `json:"name"`
			Port       int             `json:"port"`
			TargetPort json.RawMessage `json:"targetPort"`
		} `json:"ports"`
	}
	if err := json.Unmarshal(svc.Spec, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Selector) == 0 || !selects(s.Selector, w.tmpl.Metadata.Labels) {
		t.Errorf("Service %s selector %v does not select the Pushgateway's pods %v", svc.Metadata.Name, s.Selector, w.tmpl.Metadata.Labels)
	}
	target := ""
	for _, p := range s.Ports {
		if strconv.Itoa(p.Port) != u.Port() {
			continue
		}
		if len(p.TargetPort) == 0 {
			target = strconv.Itoa(p.Port)
		} else {
			target = resolvePort(t, ct, p.TargetPort)
		}
	}
	if target == "" {
		t.Errorf("PUSHGATEWAY_URL=%s: Service %s has no port %s", raw, svc.Metadata.Name, u.Port())
		return
	}
	listen := "9091" // the Pushgateway's default --web.listen-address
	for _, a := range ct.Args {
		if v, ok := strings.CutPrefix(a, "--web.listen-address="); ok {
			listen = addrPort(t, v)
		}
	}
	if target != listen {
		t.Errorf("Service %s port %s reaches container port %s, but the Pushgateway listens on %s", svc.Metadata.Name, u.Port(), target, listen)
	}
	for kind, want := range map[string]struct {
		p    *probe
		path string
	}{"readiness": {ct.ReadinessProbe, "/-/ready"}, "liveness": {ct.LivenessProbe, "/-/healthy"}} {
		if want.p == nil || want.p.HTTPGet == nil || want.p.HTTPGet.Path != want.path || resolvePort(t, ct, want.p.HTTPGet.Port) != listen {
			t.Errorf("Pushgateway %s probe %+v: want httpGet %s on %s", kind, want.p, want.path, listen)
		}
	}
	// --persistence.file in a mounted emptyDir: the pushed metrics survive
	// a container restart (the root filesystem is read-only).
	persisted := false
	for _, a := range ct.Args {
		file, ok := strings.CutPrefix(a, "--persistence.file=")
		if !ok {
			continue
		}
		for _, m := range ct.VolumeMounts {
			if !strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") {
				continue
			}
			for _, v := range w.tmpl.Spec.Volumes {
				if v.Name == m.Name && v.EmptyDir != nil {
					persisted = true
				}
			}
		}
	}
	if !persisted {
		t.Errorf("Pushgateway args %v: want --persistence.file in a mounted emptyDir", ct.Args)
	}
}

// cronPeriod is the period of a schedule that runs at a fixed interval:
// every N minutes ("* * * * *", "*/N * * * *"), every N hours ("M * * * *",
// "M */N * * *") or daily ("M H * * *"), N dividing the hour or the day.
// Other schedules: false.
func cronPeriod(schedule string) (time.Duration, bool) {
	switch schedule {
	case "@hourly":
		return time.Hour, true
	case "@daily", "@midnight":
		return 24 * time.Hour, true
	}
	f := strings.Fields(schedule)
	if len(f) != 5 || f[2] != "*" || f[3] != "*" || f[4] != "*" {
		return 0, false
	}
	every := func(field string, max int) (int, bool) { // "*" → 1, "*/N" → N
		if field == "*" {
			return 1, true
		}
		n, err := strconv.Atoi(strings.TrimPrefix(field, "*/"))
		return n, err == nil && strings.HasPrefix(field, "*/") && n > 0 && max%n == 0
	}
	at := func(field string, max int) bool {
		n, err := strconv.Atoi(field)
		return err == nil && n >= 0 && n < max
	}
	if n, ok := every(f[0], 60); ok && f[1] == "*" {
		return time.Duration(n) * time.Minute, true
	}
	if !at(f[0], 60) {
		return 0, false
	}
	if n, ok := every(f[1], 24); ok {
		return time.Duration(n) * time.Hour, true
	}
	if at(f[1], 24) {
		return 24 * time.Hour, true
	}
	return 0, false
}

func TestCronPeriod(t *testing.T) {
	t.Parallel()
	for schedule, want := range map[string]time.Duration{
		"* * * * *": time.Minute, "*/5 * * * *": 5 * time.Minute, "0 * * * *": time.Hour, "15 */6 * * *": 6 * time.Hour,
		"30 2 * * *": 24 * time.Hour, "@hourly": time.Hour,
		// Not a fixed period (or not one read here).
		"*/7 * * * *": 0, "0,30 * * * *": 0, "* * * * 1": 0, "*/5 2 * * *": 0, "* *": 0, "60 * * * *": 0,
	} {
		got, ok := cronPeriod(schedule)
		if got != want || ok != (want != 0) {
			t.Errorf("cronPeriod(%q) = %v, %v; want %v", schedule, got, ok, want)
		}
	}
}

// TestReconcilerCheckCatchesDrift: checkReconcilerCronJob fails on what it
// exists for — the loop's args, a schedule that is not RECONCILE_INTERVAL,
// retries, overlapping runs, no deadline, no push target or one that is no
// Service port, a migrate init container.
func TestReconcilerCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	rs := mustOverlay(t, "small")
	for name, change := range map[string]func(m map[string]any){
		"Loop":              func(m map[string]any) { reconcilerContainer(m)["args"] = []any{"reconciler", "--fix"} },
		"ReportOnly":        func(m map[string]any) { reconcilerContainer(m)["args"] = []any{"reconciler", "--once"} },
		"ScheduleNotPeriod": func(m map[string]any) { m["spec"].(map[string]any)["schedule"] = "*/5 * * * *" },
		"Allow":             func(m map[string]any) { m["spec"].(map[string]any)["concurrencyPolicy"] = "Allow" },
		"Retries":           func(m map[string]any) { jobSpec(m)["backoffLimit"] = 6 },
		"NoDeadline":        func(m map[string]any) { delete(jobSpec(m), "activeDeadlineSeconds") },
		"LongDeadline":      func(m map[string]any) { jobSpec(m)["activeDeadlineSeconds"] = 300 },
		"NoPush":            func(m map[string]any) { reconcilerContainer(m)["env"] = reconcilerContainer(m)["env"].([]any)[:1] },
		"MigrateInit": func(m map[string]any) {
			pod := jobSpec(m)["template"].(map[string]any)["spec"].(map[string]any)
			migrate := map[string]any{}
			for k, v := range reconcilerContainer(m) {
				migrate[k] = v
			}
			migrate["name"], migrate["args"] = "migrate", []any{"migrate"}
			pod["initContainers"] = []any{migrate}
		},
		"WrongPushPort": func(m map[string]any) {
			reconcilerContainer(m)["env"] = []any{map[string]any{"name": "OTEL_SERVICE_NAME", "value": "orderpipe-reconciler"},
				map[string]any{"name": "PUSHGATEWAY_URL", "value": "http://orderpipe-pushgateway:9090"}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			objs := changed(t, rs, "CronJob/orderpipe-reconciler", change)
			if errs := record(func(t testing.TB) { checkReconcilerCronJob(t, objs) }); len(errs) == 0 {
				t.Error("not caught")
			}
		})
	}
	// The unchanged render passes.
	if errs := record(func(t testing.TB) { checkReconcilerCronJob(t, objects(rs)) }); len(errs) != 0 {
		t.Errorf("the small overlay's reconciler: %v", errs)
	}
}

func jobSpec(m map[string]any) map[string]any {
	return m["spec"].(map[string]any)["jobTemplate"].(map[string]any)["spec"].(map[string]any)
}

func reconcilerContainer(m map[string]any) map[string]any {
	return jobSpec(m)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
}

// recorder is a testing.TB that records what a check reports, so a test can
// show the check failing on a wrong manifest. Only the methods below are
// called by the checks.
type recorder struct {
	testing.TB
	errs []string
}

type recorderFatal struct{}

func (r *recorder) Helper()                   {}
func (r *recorder) Error(a ...any)            { r.errs = append(r.errs, fmt.Sprint(a...)) }
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recorder) Fatal(a ...any)            { r.Error(a...); panic(recorderFatal{}) }
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); panic(recorderFatal{}) }

// record runs check and returns what it reported.
func record(check func(testing.TB)) (errs []string) {
	r := &recorder{}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(recorderFatal); !ok {
				panic(v)
			}
		}
		errs = r.errs
	}()
	check(r)
	return r.errs
}

// changed is rs as objects, with the spec of the object id (kind/name)
// changed by change (given the whole object, generically).
func changed(t *testing.T, rs []rendered, id string, change func(map[string]any)) []object {
	t.Helper()
	objs := objects(rs)
	found := false
	for i := range objs {
		if rs[i].id() != id {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(rs[i].raw, &m); err != nil {
			t.Fatal(err)
		}
		change(m)
		b, err := json.Marshal(m["spec"])
		if err != nil {
			t.Fatal(err)
		}
		objs[i].Spec, found = b, true
	}
	if !found {
		t.Fatalf("no %s rendered", id)
	}
	return objs
}

// TestWorkloadsAreHardened: every pod template of every overlay — each
// Deployment's, the reconciler CronJob's jobTemplate, the Pushgateway's —
// runs as a non-root user under the RuntimeDefault seccomp profile; every
// container and init container runs without privilege escalation, on a
// read-only root filesystem, with every capability dropped, with requests and
// limits on CPU and memory, on a pinned image (the orderpipe image at the
// overlay's tag, a third-party one at an explicit version); every volume
// mount names a volume of the pod and every Secret volume a rendered Secret.
func TestWorkloadsAreHardened(t *testing.T) {
	t.Parallel()
	for _, overlay := range overlays(t) {
		objs := objects(mustOverlay(t, overlay))
		kinds := map[string]bool{}
		for i := range objs {
			if !isWorkload(objs[i].Kind) {
				continue
			}
			kinds[objs[i].Kind] = true
			t.Run(overlay+"/"+objs[i].Kind+"/"+objs[i].Metadata.Name, func(t *testing.T) { checkHardened(t, objs, &objs[i]) })
		}
		if !kinds["Deployment"] || !kinds["CronJob"] {
			t.Errorf("%s: workload kinds %v, want Deployments and the reconciler CronJob checked", overlay, kinds)
		}
	}
}

func checkHardened(t testing.TB, objs []object, o *object) {
	t.Helper()
	spec := mustWorkload(t, o).tmpl.Spec
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || (sc.RunAsUser != nil && *sc.RunAsUser == 0) {
		t.Error("pod securityContext: want runAsNonRoot and a non-zero runAsUser")
	} else if sc.SeccompProfile == nil || sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Error("pod securityContext: want seccompProfile RuntimeDefault")
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
		if v.Secret != nil && find(objs, "Secret", v.Secret.SecretName) == nil {
			t.Errorf("volume %s: Secret %s is not rendered", v.Name, v.Secret.SecretName)
		}
	}
	id := o.Kind + "/" + o.Metadata.Name
	if len(spec.Containers) == 0 {
		t.Fatal("no containers")
	}
	for _, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
		sc := ct.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: securityContext: want allowPrivilegeEscalation false, readOnlyRootFilesystem true, capabilities drop ALL", ct.Name)
		}
		for _, r := range []string{"cpu", "memory"} {
			if ct.Resources.Requests[r] == "" || ct.Resources.Limits[r] == "" {
				t.Errorf("%s: resources %+v: want requests and limits for %s", ct.Name, ct.Resources, r)
			}
		}
		repo, tag := imageRepoTag(ct.Image)
		switch third, ok := k8sThirdParty[id]; {
		case tag == "" || tag == "latest":
			t.Errorf("%s: image %q: want a pinned version", ct.Name, ct.Image)
		case ok && repo != third:
			t.Errorf("%s: image %s, declared %s (k8sThirdParty)", ct.Name, ct.Image, third)
		case !ok && !isOrderpipeImage(ct.Image):
			t.Errorf("%s: image %s is not the orderpipe image (a third-party workload goes in k8sThirdParty)", ct.Name, ct.Image)
		}
		for _, m := range ct.VolumeMounts {
			if !volumes[m.Name] {
				t.Errorf("%s: mounts %s, no volume of the pod", ct.Name, m.Name)
			}
		}
	}
}

// TestHardeningCheckCatchesDrift: checkHardened fails on the reconciler
// CronJob's pod as on a Deployment's — a writable root filesystem, an
// unpinned image, no limits, a mount of a missing Secret.
func TestHardeningCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	rs := mustOverlay(t, "small")
	const id = "CronJob/orderpipe-reconciler"
	for name, change := range map[string]func(map[string]any){
		"WritableRoot": func(m map[string]any) {
			reconcilerContainer(m)["securityContext"].(map[string]any)["readOnlyRootFilesystem"] = false
		},
		"Unpinned": func(m map[string]any) { reconcilerContainer(m)["image"] = "registry.example.com/orderpipe:latest" },
		"NoLimits": func(m map[string]any) { delete(reconcilerContainer(m)["resources"].(map[string]any), "limits") },
		"Root": func(m map[string]any) {
			delete(jobSpec(m)["template"].(map[string]any)["spec"].(map[string]any), "securityContext")
		},
		"MissingSecret": func(m map[string]any) {
			podVolumes(m)[0].(map[string]any)["secret"].(map[string]any)["secretName"] = "nope"
		},
	} {
		t.Run(name, func(t *testing.T) {
			objs := changed(t, rs, id, change)
			if errs := record(func(t testing.TB) { checkHardened(t, objs, find(objs, "CronJob", "orderpipe-reconciler")) }); len(errs) == 0 {
				t.Error("not caught")
			}
		})
	}
	objs := objects(rs)
	if errs := record(func(t testing.TB) { checkHardened(t, objs, find(objs, "CronJob", "orderpipe-reconciler")) }); len(errs) != 0 {
		t.Errorf("the small overlay's reconciler: %v", errs)
	}
}

func podVolumes(m map[string]any) []any {
	return jobSpec(m)["template"].(map[string]any)["spec"].(map[string]any)["volumes"].([]any)
}

// serviceMonitor is the part of a prometheus-operator ServiceMonitor the
// checks read.
type serviceMonitor struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels      map[string]string `json:"matchLabels"`
			MatchExpressions []struct {
				Key      string   `json:"key"`
				Operator string   `json:"operator"`
				Values   []string `json:"values"`
			} `json:"matchExpressions"`
		} `json:"selector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			HonorLabels bool   `json:"honorLabels"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// selects reports whether the ServiceMonitor selects a Service of these labels.
func (sm serviceMonitor) selects(t testing.TB, labels map[string]string) bool {
	if !selects(sm.Spec.Selector.MatchLabels, labels) {
		return false
	}
	for _, e := range sm.Spec.Selector.MatchExpressions {
		v, ok := labels[e.Key]
		switch e.Operator {
		case "In":
			if !ok || !slices.Contains(e.Values, v) {
				return false
			}
		case "NotIn":
			if ok && slices.Contains(e.Values, v) {
				return false
			}
		case "Exists":
			if !ok {
				return false
			}
		case "DoesNotExist":
			if ok {
				return false
			}
		default:
			t.Fatalf("ServiceMonitor %s: selector operator %s", sm.Metadata.Name, e.Operator)
		}
	}
	return true
}

// TestPushgatewayScrapedWithHonorLabels: where the overlay has
// ServiceMonitors (production, the prometheus-operator component), one
// scrapes the Pushgateway's Service on its port at /metrics, and every
// endpoint that reaches that Service keeps the pushed labels (honorLabels:
// without it the pushed job="orderpipe-reconciler" becomes the scrape's own
// job and the reconciler's series lose who pushed them). The selector names
// only Services that exist (not the reconciler's old headless one).
func TestPushgatewayScrapedWithHonorLabels(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, overlay := range overlays(t) {
		rs := mustOverlay(t, overlay)
		var sms []serviceMonitor
		for _, r := range rs {
			if r.Kind == "ServiceMonitor" {
				var sm serviceMonitor
				if err := yaml.Unmarshal(r.raw, &sm); err != nil {
					t.Fatal(err)
				}
				sms = append(sms, sm)
			}
		}
		if len(sms) == 0 {
			continue // no prometheus-operator here: the Prometheus config is the user's
		}
		checked++
		t.Run(overlay, func(t *testing.T) {
			for _, bad := range checkPushgatewayScrape(t, objects(rs), sms) {
				t.Error(bad)
			}
		})
	}
	if checked == 0 {
		t.Error("no overlay renders a ServiceMonitor")
	}
}

func checkPushgatewayScrape(t testing.TB, objs []object, sms []serviceMonitor) []string {
	var bad []string
	svc := find(objs, "Service", "orderpipe-pushgateway")
	if svc == nil {
		return []string{"no Service orderpipe-pushgateway"}
	}
	var s struct {
		Ports []struct {
			Name string `json:"name"`
		} `json:"ports"`
	}
	if err := json.Unmarshal(svc.Spec, &s); err != nil {
		t.Fatal(err)
	}
	scraped := false
	for _, sm := range sms {
		for _, e := range sm.Spec.Selector.MatchExpressions {
			if e.Operator != "In" {
				continue
			}
			for _, v := range e.Values {
				if !slices.ContainsFunc(objs, func(o object) bool { return o.Kind == "Service" && o.Metadata.Labels[e.Key] == v }) {
					bad = append(bad, fmt.Sprintf("ServiceMonitor %s selects %s=%s, which no Service has", sm.Metadata.Name, e.Key, v))
				}
			}
		}
		if !sm.selects(t, svc.Metadata.Labels) {
			continue
		}
		for _, e := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(s.Ports, func(p struct {
				Name string `json:"name"`
			}) bool {
				return p.Name == e.Port
			}) {
				continue
			}
			if !e.HonorLabels {
				bad = append(bad, fmt.Sprintf("ServiceMonitor %s scrapes the Pushgateway on port %s without honorLabels: the pushed job label would be replaced", sm.Metadata.Name, e.Port))
			}
			if e.Path == "" || e.Path == "/metrics" {
				scraped = true
			}
		}
	}
	if !scraped {
		bad = append(bad, "no ServiceMonitor scrapes the Pushgateway's Service /metrics: the reconciler's pushed metrics never reach Prometheus")
	}
	return bad
}

// TestPushgatewayScrapeCheckCatchesDrift: the check fails without
// honorLabels, without the Pushgateway selected, and with a stale selection.
func TestPushgatewayScrapeCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	rs := mustOverlay(t, "production")
	var base serviceMonitor
	for _, r := range rs {
		if r.Kind == "ServiceMonitor" {
			if err := yaml.Unmarshal(r.raw, &base); err != nil {
				t.Fatal(err)
			}
		}
	}
	objs := objects(rs)
	if bad := checkPushgatewayScrape(t, objs, []serviceMonitor{base}); len(bad) != 0 {
		t.Fatalf("production's ServiceMonitor: %v", bad)
	}
	clone := func() serviceMonitor {
		var sm serviceMonitor
		b, _ := json.Marshal(base)
		json.Unmarshal(b, &sm)
		return sm
	}
	for name, change := range map[string]func(*serviceMonitor){
		"NoHonorLabels": func(sm *serviceMonitor) {
			for i := range sm.Spec.Endpoints {
				sm.Spec.Endpoints[i].HonorLabels = false
			}
		},
		"NotSelected": func(sm *serviceMonitor) {
			e := &sm.Spec.Selector.MatchExpressions[0]
			e.Values = slices.DeleteFunc(slices.Clone(e.Values), func(v string) bool { return v == "orderpipe-pushgateway" })
		},
		"StaleSelection": func(sm *serviceMonitor) {
			e := &sm.Spec.Selector.MatchExpressions[0]
			e.Values = append(slices.Clone(e.Values), "orderpipe-reconciler")
		},
	} {
		t.Run(name, func(t *testing.T) {
			sm := clone()
			change(&sm)
			if bad := checkPushgatewayScrape(t, objs, []serviceMonitor{sm}); len(bad) == 0 {
				t.Error("not caught")
			}
		})
	}
}
