package deploy

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The one declaration of the orderpipe processes every deployment shape
// runs — docker-compose.yml and each Kubernetes overlay — with the
// settings they share. Each shape is checked against it (command, variable
// names, shared values, ports), so a setting added to one shape and not the
// other, a changed command or a moved port fails here.

// process is one orderpipe process as every shape runs it (unless a
// shape's runs says otherwise).
type process struct {
	name   string   // compose service; Kubernetes workload orderpipe-<name> (migrate: the init container of each Deployment)
	args   []string // the container's command (compose) and args (Kubernetes)
	serves []string // the variables of the addresses it listens on: published, probed, scraped
	env    []string // variables only this process gets, in every shape
}

// run is how a shape runs a process differently from the declaration.
type run struct {
	args   []string
	serves []string // nil: it listens on nothing, so it has no ports
	why    string
}

var processes = []process{
	{name: "migrate", args: []string{"migrate"}},
	{name: "gateway", args: []string{"gateway"}, serves: []string{"HTTP_ADDR"}, env: []string{"ADMIN_TOKEN_FILE", "EVENT_SIGNING_KEY_FILE"}},
	{name: "worker", args: []string{"worker"}, serves: []string{"METRICS_ADDR"}, env: []string{"EVENT_SIGNING_KEY_FILE"}},
	{name: "closer", args: []string{"closer"}, serves: []string{"METRICS_ADDR"}},
	{name: "relay", args: []string{"relay"}, serves: []string{"METRICS_ADDR"}},
	{name: "webhook", args: []string{"webhook"}, serves: []string{"METRICS_ADDR"}, env: []string{"WEBHOOK_SECRET_FILE"}},
	{name: "reconciler", args: []string{"reconciler", "--fix"}, serves: []string{"METRICS_ADDR"}},
}

// settings every process gets, with the same value in every shape (unless
// a shape's overrides say otherwise).
var settings = map[string]string{
	"HTTP_ADDR":                   ":8080",
	"METRICS_ADDR":                ":9090",
	"KAFKA_PARTITIONS":            "12",
	"CLOSE_AFTER":                 "30m",
	"CLOSER_INTERVAL":             "2s",
	"REDRIVE_AFTER":               "30s",
	"REDRIVE_INTERVAL":            "5s",
	"RECONCILE_INTERVAL":          "1m",
	"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
	"WEBHOOK_URLS":                "", // off until an endpoint is known; compose passes the shell's through
}

// wiring are the variables every process gets whose values are the shape's
// own: where the dependencies and the secret files are.
var wiring = []string{"DATABASE_URL_FILE", "REDIS_ADDR", "KAFKA_BROKERS", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_RESOURCE_ATTRIBUTES"}

// shape is one deployment shape's differences from the declaration, each
// with its reason.
type shape struct {
	// extra variables every process of the shape gets → why.
	extra map[string]string
	// extraFor are variables one process gets → name → why.
	extraFor map[string]map[string]string
	// replaces: a wiring variable given in another form → the form.
	replaces map[string]string
	// overrides of shared settings' values.
	overrides map[string]string
	// runs: a process run another way (command, what it serves) → how.
	runs map[string]run
}

var kubernetesShape = shape{
	extra: map[string]string{
		"ADMIN_ADDR": "the admin API on its own port behind its own Service, never the public one (compose publishes only :8080 on the host)",
	},
	extraFor: map[string]map[string]string{
		"gateway":    {"DB_MAX_CONNS": "a small pool per gateway: the HPA's maximum × the pool stays inside Postgres's connection budget"},
		"reconciler": {"PUSHGATEWAY_URL": "a --once pass exits before any scrape: it pushes its metrics to the Pushgateway"},
	},
	runs: map[string]run{
		"reconciler": {
			args: []string{"reconciler", "--once", "--fix"},
			why:  "a CronJob runs one pass per RECONCILE_INTERVAL and serves nothing (its metrics are pushed); compose loops and is scraped on METRICS_ADDR",
		},
	},
}

var shapes = map[string]shape{
	"compose": {},
	"small":   kubernetesShape,
	"production": {
		extra: merge(kubernetesShape.extra, map[string]string{
			"REDIS_TLS_CA_FILE":              "Redis Cluster over TLS",
			"KAFKA_TLS":                      "Kafka over TLS",
			"KAFKA_TLS_CA_FILE":              "Kafka over TLS",
			"KAFKA_SASL_MECHANISM":           "Kafka SCRAM login",
			"KAFKA_SASL_USERNAME":            "Kafka SCRAM login",
			"KAFKA_SASL_PASSWORD_FILE":       "Kafka SCRAM login",
			"OTEL_EXPORTER_OTLP_CERTIFICATE": "traces over TLS",
		}),
		extraFor:  kubernetesShape.extraFor,
		replaces:  map[string]string{"REDIS_ADDR": "REDIS_URL_FILE"}, // rediss:// with the ACL password: a secret
		overrides: map[string]string{"KAFKA_PARTITIONS": "24"},
		runs:      kubernetesShape.runs,
	},
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// components are the compose services built from deploy/Dockerfile, with the
// subcommand each runs: the declared processes.
var components = func() map[string]string {
	m := map[string]string{}
	for _, p := range processes {
		m[p.name] = p.args[0]
	}
	return m
}()

// instance is a process as one shape runs it.
type instance struct {
	args  []string
	env   map[string]string
	ports []int // container ports (Kubernetes) or published/probed ports (compose)
}

// composeInstances reads docker-compose.yml.
func composeInstances(t *testing.T) map[string][]instance {
	p := mustCompose(t)
	out := map[string][]instance{}
	urlRe := regexp.MustCompile(`https?://[^\s"']+`)
	for name, s := range p.Services {
		if s.Build == nil {
			continue // not an orderpipe image
		}
		in := instance{args: s.Command, env: envOf(s)}
		for _, pc := range s.Ports {
			in.ports = append(in.ports, int(pc.Target))
		}
		if s.HealthCheck != nil {
			if u, err := url.Parse(urlRe.FindString(strings.Join(s.HealthCheck.Test, " "))); err == nil && u.Port() != "" {
				n, _ := strconv.Atoi(u.Port())
				in.ports = append(in.ports, n)
			}
		}
		out[name] = append(out[name], in)
	}
	return out
}

// kubernetesInstances reads a rendered overlay: each orderpipe workload's
// container (Deployments and the reconciler CronJob), and each Deployment's
// migrate init container as the migrate process (the CronJob has none,
// k8s_test.go). The third-party workloads
// (k8sThirdParty: the Pushgateway) run no orderpipe process.
func kubernetesInstances(t *testing.T, overlay string) map[string][]instance {
	objs := objects(mustOverlay(t, overlay))
	out := map[string][]instance{}
	for i := range objs {
		if !isWorkload(objs[i].Kind) {
			continue
		}
		if _, ok := k8sThirdParty[objs[i].Kind+"/"+objs[i].Metadata.Name]; ok {
			continue
		}
		name, ok := strings.CutPrefix(objs[i].Metadata.Name, "orderpipe-")
		if !ok {
			t.Errorf("%s %s is not orderpipe-<process>", objs[i].Kind, objs[i].Metadata.Name)
			continue
		}
		spec := mustWorkload(t, &objs[i]).tmpl.Spec
		for j, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			in := instance{args: c.Args, env: c.env(t, objs)}
			for _, p := range c.Ports {
				in.ports = append(in.ports, p.ContainerPort)
			}
			n := name
			if j < len(spec.InitContainers) {
				n = c.Name
			}
			out[n] = append(out[n], in)
		}
	}
	return out
}

// TestShapesMatchTheDeclaration: compose and every Kubernetes overlay run
// exactly the declared processes, each with the declared command, exactly
// the declared variable names (plus the shape's declared differences), the
// shared settings' values, its own OTEL_SERVICE_NAME, and the ports its
// listen addresses say — and none for a process that serves nothing (the
// Kubernetes reconciler, a --once CronJob pass; compose's loops and is
// scraped).
func TestShapesMatchTheDeclaration(t *testing.T) {
	t.Parallel()
	c := mustCode(t)
	for name, sh := range shapes {
		t.Run(name, func(t *testing.T) {
			var got map[string][]instance
			if name == "compose" {
				got = composeInstances(t)
			} else {
				got = kubernetesInstances(t, name)
			}
			var declared []string
			for _, p := range processes {
				declared = append(declared, p.name)
			}
			if names := sortedKeys(got); !slices.Equal(names, sortedStrings(declared)) {
				t.Errorf("processes %v, declared %v", names, sortedStrings(declared))
			}
			for _, p := range processes {
				if len(got[p.name]) == 0 {
					continue
				}
				for _, in := range got[p.name] {
					for _, bad := range checkInstance(c, sh, p, in) {
						t.Errorf("%s: %s", p.name, bad)
					}
				}
			}
		})
	}
	// Every variable declared is one the code reads.
	for _, sh := range shapes {
		for _, names := range [][]string{sortedKeys(settings), wiring, sortedKeys(sh.extra), sortedKeys(sh.replaces)} {
			for _, n := range names {
				if !c.knownEnv(n) {
					t.Errorf("declared variable %s is not read by the code", n)
				}
			}
		}
	}
}

// checkInstance lists how one running process differs from its declaration
// in a shape.
func checkInstance(c code, sh shape, p process, in instance) []string {
	var bad []string
	if r, ok := sh.runs[p.name]; ok {
		p.args, p.serves = r.args, r.serves
	}
	if !slices.Equal(in.args, p.args) {
		bad = append(bad, fmt.Sprintf("command %v, declared %v", in.args, p.args))
	}
	want := map[string]bool{"OTEL_SERVICE_NAME": true}
	for k := range settings {
		want[k] = true
	}
	for _, k := range slices.Concat(wiring, p.env) {
		if r, ok := sh.replaces[k]; ok {
			k = r
		}
		want[k] = true
	}
	for k := range sh.extra {
		want[k] = true
	}
	for k := range sh.extraFor[p.name] {
		want[k] = true
	}
	for _, k := range sortedKeys(want) {
		if _, ok := in.env[k]; !ok {
			bad = append(bad, "does not set "+k)
		}
	}
	for _, k := range sortedKeys(in.env) {
		if !want[k] {
			bad = append(bad, "sets "+k+", which the declaration does not have (add it to both shapes, or to the shape's differences with the reason)")
		}
	}
	for k, v := range settings {
		if o, ok := sh.overrides[k]; ok {
			v = o
		}
		if got, ok := in.env[k]; ok && got != v {
			bad = append(bad, fmt.Sprintf("%s=%q, declared %q", k, got, v))
		}
	}
	if got, wantName := in.env["OTEL_SERVICE_NAME"], "orderpipe-"+p.name; got != wantName {
		bad = append(bad, fmt.Sprintf("OTEL_SERVICE_NAME=%q, want %q", got, wantName))
	}
	for _, v := range p.serves {
		addr := in.env[v]
		if addr == "" {
			addr = c.env[v].value
		}
		_, port, _ := strings.Cut(addr, ":")
		n, _ := strconv.Atoi(port)
		if !slices.Contains(in.ports, n) {
			bad = append(bad, fmt.Sprintf("listens on %s=%s, but port %d is not among its ports %v", v, addr, n, in.ports))
		}
	}
	if len(p.serves) == 0 && len(in.ports) > 0 {
		bad = append(bad, fmt.Sprintf("serves nothing, but has ports %v", in.ports))
	}
	return bad
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestDeclarationCheckCatchesDrift: the check fails on the drift it exists
// for — a setting one shape has and the other not, another value, another
// command, a port moved.
func TestDeclarationCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	c := mustCode(t)
	gw := processes[1]
	ok := instance{args: []string{"gateway"}, env: map[string]string{"OTEL_SERVICE_NAME": "orderpipe-gateway", "ADMIN_TOKEN_FILE": "/x", "EVENT_SIGNING_KEY_FILE": "/y"}, ports: []int{8080}}
	for k, v := range settings {
		ok.env[k] = v
	}
	for _, k := range wiring {
		ok.env[k] = "x"
	}
	if bad := checkInstance(c, shapes["compose"], gw, ok); len(bad) != 0 {
		t.Fatalf("a matching gateway: %v", bad)
	}
	for name, change := range map[string]func(*instance){
		"ExtraSetting":  func(in *instance) { in.env["WORKER_BATCH_SIZE"] = "500" },
		"MissingWiring": func(in *instance) { delete(in.env, "KAFKA_BROKERS") },
		"OtherValue":    func(in *instance) { in.env["CLOSE_AFTER"] = "15m" },
		"OtherCommand":  func(in *instance) { in.args = []string{"gateway", "--x"} },
		"PortMoved":     func(in *instance) { in.env["HTTP_ADDR"] = ":8088" },
	} {
		t.Run(name, func(t *testing.T) {
			in := instance{args: slices.Clone(ok.args), env: merge(ok.env, nil), ports: ok.ports}
			change(&in)
			if bad := checkInstance(c, shapes["compose"], gw, in); len(bad) == 0 {
				t.Error("not caught")
			}
		})
	}
	// The reconciler: compose loops (`reconciler --fix`, scraped on
	// METRICS_ADDR), Kubernetes runs `--once --fix` with PUSHGATEWAY_URL and
	// no ports; each shape's form is refused in the other.
	rc := processes[len(processes)-1]
	if rc.name != "reconciler" {
		t.Fatalf("the last declared process is %s, not the reconciler", rc.name)
	}
	loop := instance{args: []string{"reconciler", "--fix"}, env: map[string]string{"OTEL_SERVICE_NAME": "orderpipe-reconciler"}, ports: []int{9090}}
	for k, v := range settings {
		loop.env[k] = v
	}
	for _, k := range wiring {
		loop.env[k] = "x"
	}
	pass := instance{args: []string{"reconciler", "--once", "--fix"}, env: merge(loop.env, kubernetesShape.extra)}
	pass.env["PUSHGATEWAY_URL"] = "http://orderpipe-pushgateway:9091"
	if bad := checkInstance(c, shapes["compose"], rc, loop); len(bad) != 0 {
		t.Errorf("compose's loop reconciler: %v", bad)
	}
	if bad := checkInstance(c, shapes["small"], rc, pass); len(bad) != 0 {
		t.Errorf("the CronJob's reconciler pass: %v", bad)
	}
	for name, tc := range map[string]struct {
		shape string
		in    instance
	}{
		"ComposeOnce":        {"compose", instance{args: pass.args, env: loop.env, ports: loop.ports}},
		"ComposeNotServing":  {"compose", instance{args: loop.args, env: loop.env}},
		"ComposePushes":      {"compose", instance{args: loop.args, env: merge(loop.env, map[string]string{"PUSHGATEWAY_URL": "x"}), ports: loop.ports}},
		"KubernetesLoop":     {"small", instance{args: loop.args, env: pass.env}},
		"KubernetesReport":   {"small", instance{args: []string{"reconciler", "--once"}, env: pass.env}},
		"KubernetesPorts":    {"small", instance{args: pass.args, env: pass.env, ports: []int{9090}}},
		"KubernetesNoTarget": {"small", instance{args: pass.args, env: merge(loop.env, kubernetesShape.extra)}},
	} {
		t.Run("Reconciler"+name, func(t *testing.T) {
			if bad := checkInstance(c, shapes[tc.shape], rc, tc.in); len(bad) == 0 {
				t.Error("not caught")
			}
		})
	}
}
