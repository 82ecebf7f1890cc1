package deploy

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"

	"orderpipe/pkg/event"
)

// mustCompose loads docker-compose.yml the way `docker compose` does
// (interpolation, merge keys, normalization, validation).
func mustCompose(t *testing.T) *types.Project {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  abs,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(abs, "docker-compose.yml")}},
		Environment: types.Mapping{}, // nothing from the caller's shell
	}, func(o *loader.Options) { o.SetProjectName("orderpipe", true) })
	if err != nil {
		t.Fatalf("loading docker-compose.yml: %v", err)
	}
	return p
}

func envOf(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	return env
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	p := mustCompose(t)
	c := mustCode(t)
	want := []string{"postgres", "redis", "kafka", "kafka-init", "otel-collector", "jaeger", "prometheus", "grafana",
		"migrate", "gateway", "worker", "closer", "reconciler", "relay", "webhook"}
	for _, name := range want {
		if _, ok := p.Services[name]; !ok {
			t.Errorf("no service %q", name)
		}
	}
	images := map[string]bool{}
	for name, sub := range components {
		s, ok := p.Services[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			if s.Build == nil || s.Build.Dockerfile != "deploy/Dockerfile" || filepath.Clean(s.Build.Context) != mustAbs(t, root) {
				t.Errorf("build %+v, want context the repo root and dockerfile deploy/Dockerfile", s.Build)
			}
			images[s.Image] = true
			if len(s.Entrypoint) > 0 {
				t.Errorf("entrypoint %v overrides the image's `orderpipe`", s.Entrypoint)
			}
			if len(s.Command) == 0 || s.Command[0] != sub {
				t.Errorf("command %v, want %q first", s.Command, sub)
			}
			for _, bad := range c.checkArgs(s.Command) {
				t.Error(bad)
			}
		})
	}
	if len(images) != 1 {
		t.Errorf("components use images %v: want one image for all", sortedKeys(images))
	}
	if cmd := p.Services["reconciler"].Command; slices.Contains(cmd, "--once") {
		t.Errorf("reconciler %v: the compose service is the schedule, it must loop (no --once)", cmd)
	}
	if s := p.Services["migrate"]; s.Restart != "no" {
		t.Errorf("migrate restart %q: a one-shot must not restart", s.Restart)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func TestComposeHealthAndOrder(t *testing.T) {
	t.Parallel()
	p := mustCompose(t)
	healthy := func(name string) bool {
		s, ok := p.Services[name]
		return ok && s.HealthCheck != nil && !s.HealthCheck.Disable && len(s.HealthCheck.Test) > 0
	}
	for _, name := range []string{"postgres", "redis", "kafka", "gateway"} {
		if !healthy(name) {
			t.Errorf("%s has no healthcheck", name)
		}
	}
	// Every service_healthy condition must point at a service that has a
	// healthcheck, or compose waits forever.
	for name, s := range p.Services {
		for dep, d := range s.DependsOn {
			if _, ok := p.Services[dep]; !ok {
				t.Errorf("%s depends on missing service %s", name, dep)
			}
			if d.Condition == types.ServiceConditionHealthy && !healthy(dep) {
				t.Errorf("%s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			}
		}
	}
	wants := map[string]map[string]string{
		"kafka-init": {"kafka": types.ServiceConditionHealthy},
		"migrate":    {"postgres": types.ServiceConditionHealthy},
		"gateway": {"migrate": types.ServiceConditionCompletedSuccessfully, "kafka-init": types.ServiceConditionCompletedSuccessfully,
			"redis": types.ServiceConditionHealthy},
		"worker": {"migrate": types.ServiceConditionCompletedSuccessfully, "kafka-init": types.ServiceConditionCompletedSuccessfully,
			"redis": types.ServiceConditionHealthy},
		"closer":     {"migrate": types.ServiceConditionCompletedSuccessfully, "redis": types.ServiceConditionHealthy},
		"relay":      {"migrate": types.ServiceConditionCompletedSuccessfully, "kafka-init": types.ServiceConditionCompletedSuccessfully},
		"webhook":    {"migrate": types.ServiceConditionCompletedSuccessfully},
		"reconciler": {"migrate": types.ServiceConditionCompletedSuccessfully, "redis": types.ServiceConditionHealthy},
	}
	for name, deps := range wants {
		for dep, cond := range deps {
			if got := p.Services[name].DependsOn[dep].Condition; got != cond {
				t.Errorf("%s depends on %s with %q, want %q", name, dep, got, cond)
			}
		}
	}
}

// TestComposeTopics: kafka-init creates the topics the code uses, with the
// partitions KAFKA_PARTITIONS says, and the broker does not auto-create.
func TestComposeTopics(t *testing.T) {
	t.Parallel()
	p := mustCompose(t)
	script := strings.Join(p.Services["kafka-init"].Command, " ")
	for _, topic := range []string{event.Topic, event.DLQTopic, event.StatusTopic} {
		if !strings.Contains(script, topic) {
			t.Errorf("kafka-init does not create %s", topic)
		}
	}
	m := regexp.MustCompile(`--partitions (\d+)`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("kafka-init sets no --partitions: %s", script)
	}
	for name := range components {
		if got := envOf(p.Services[name])["KAFKA_PARTITIONS"]; got != "" && got != m[1] {
			t.Errorf("%s KAFKA_PARTITIONS=%s, but kafka-init creates %s partitions", name, got, m[1])
		}
	}
	broker := kafkaBrokerConfig(t, p)
	if got := broker["auto.create.topics.enable"]; got != "false" {
		t.Errorf("kafka auto.create.topics.enable=%q: a typo'd topic would be created with default partitions", got)
	}
	if roles := broker["process.roles"]; !strings.Contains(roles, "controller") {
		t.Errorf("kafka is not in KRaft mode: process.roles=%q", roles)
	}
	if got := broker["num.partitions"]; got != m[1] {
		t.Errorf("kafka num.partitions=%q, but kafka-init creates %s partitions", got, m[1])
	}
	for name := range components {
		if name == "migrate" {
			continue
		}
		brokers := envOf(p.Services[name])["KAFKA_BROKERS"]
		for _, b := range strings.Split(brokers, ",") {
			host, _, _ := strings.Cut(b, ":")
			if _, ok := p.Services[host]; !ok && brokers != "" {
				t.Errorf("%s KAFKA_BROKERS=%s names no compose service", name, brokers)
			}
		}
	}
}

// kafkaBrokerConfig is the kafka service's broker configuration as the
// apache/kafka image builds it: the server.properties mounted into
// /mnt/shared/config (deploy/kafka/server.properties, shared with
// deploy/kafka/kafka.sh), then the KAFKA_* variables, which win.
func kafkaBrokerConfig(t *testing.T, p *types.Project) map[string]string {
	t.Helper()
	s := p.Services["kafka"]
	cfg := map[string]string{}
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind || v.Target != "/mnt/shared/config/server.properties" {
			continue
		}
		for _, line := range strings.Split(string(mustRead(t, v.Source)), "\n") {
			line = strings.TrimSpace(line)
			if k, val, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
				cfg[strings.TrimSpace(k)] = strings.TrimSpace(val)
			}
		}
	}
	if len(cfg) == 0 {
		t.Errorf("kafka mounts no server.properties at /mnt/shared/config (volumes %+v)", s.Volumes)
	}
	for k, v := range envOf(s) {
		name, ok := strings.CutPrefix(k, "KAFKA_")
		if !ok || strings.HasSuffix(name, "_OPTS") {
			continue
		}
		// The image's mapping: _ is ., __ is _, ___ is -.
		name = strings.ReplaceAll(strings.ToLower(name), "_", ".")
		name = strings.ReplaceAll(strings.ReplaceAll(name, "...", "-"), "..", "_")
		cfg[name] = v
	}
	return cfg
}

// TestComposeEnvironment: every variable set is one the code reads; every
// component gets what it needs (or its _FILE form); secrets come as files.
func TestComposeEnvironment(t *testing.T) {
	t.Parallel()
	p := mustCompose(t)
	c := mustCode(t)
	serviceNames := map[string]bool{}
	for name, sub := range components {
		s := p.Services[name]
		env := envOf(s)
		t.Run(name, func(t *testing.T) {
			for _, k := range sortedKeys(env) {
				if !c.knownEnv(k) {
					t.Errorf("sets %s, which the code does not read", k)
				}
			}
			for _, n := range needs[sub] {
				if !given(env, n) {
					t.Errorf("needs %s (or %s_FILE): its default %q is wrong in a container", n, n, c.env[n].value)
				}
			}
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"} {
				if env[k] == "" {
					t.Errorf("%s not set", k)
				}
			}
			if sn := env["OTEL_SERVICE_NAME"]; serviceNames[sn] {
				t.Errorf("OTEL_SERVICE_NAME %q used twice", sn)
			} else {
				serviceNames[sn] = true
			}
			if u, err := url.Parse(env["OTEL_EXPORTER_OTLP_ENDPOINT"]); err != nil || p.Services[u.Hostname()].Name == "" {
				t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT %q is not a compose service", env["OTEL_EXPORTER_OTLP_ENDPOINT"])
			}
			// No secret in plain text: tokens and the database URL (it holds the
			// password) come as files, mounted from compose secrets.
			for k, v := range env {
				upper := strings.ToUpper(k)
				if strings.HasSuffix(k, "_FILE") {
					i := slices.IndexFunc(s.Secrets, func(r types.ServiceSecretConfig) bool {
						return r.Target == v || r.Target == "" && "/run/secrets/"+r.Source == v
					})
					if i < 0 {
						t.Errorf("%s=%s is not a compose secret mounted in this service", k, v)
					} else if _, ok := p.Secrets[s.Secrets[i].Source]; !ok {
						t.Errorf("%s=%s: no top-level secret %q", k, v, s.Secrets[i].Source)
					}
					continue
				}
				if k == "DATABASE_URL" || strings.Contains(upper, "TOKEN") || strings.Contains(upper, "PASSWORD") || strings.Contains(upper, "SECRET") {
					t.Errorf("%s is set in plain text; use %s_FILE and a compose secret", k, k)
				}
			}
		})
	}
	// Every top-level secret is a file under deploy/secrets with a committed
	// example, and generate.sh creates it.
	gen := string(mustRead(t, filepath.Join(root, "deploy", "secrets", "generate.sh")))
	for name, sec := range p.Secrets {
		rel, err := filepath.Rel(mustAbs(t, root), sec.File)
		if err != nil || filepath.Dir(rel) != filepath.Join("deploy", "secrets") {
			t.Errorf("secret %s comes from %s, want a file under deploy/secrets", name, sec.File)
			continue
		}
		if _, err := os.Stat(filepath.Join(root, rel+".example")); err != nil {
			t.Errorf("secret %s has no %s.example", name, rel)
		}
		if !strings.Contains(gen, filepath.Base(rel)) {
			t.Errorf("deploy/secrets/generate.sh does not create %s", filepath.Base(rel))
		}
	}
	pg := envOf(p.Services["postgres"])
	if pg["POSTGRES_PASSWORD"] != "" || pg["POSTGRES_PASSWORD_FILE"] == "" {
		t.Errorf("postgres must take its password from a secret file (POSTGRES_PASSWORD_FILE), got %v", pg)
	}
	example := strings.TrimSpace(string(mustRead(t, filepath.Join(root, "deploy", "secrets", "database_url.example"))))
	u, err := url.Parse(example)
	if err != nil {
		t.Fatalf("database_url.example: %v", err)
	}
	if u.User.Username() != pg["POSTGRES_USER"] || strings.TrimPrefix(u.Path, "/") != pg["POSTGRES_DB"] || u.Hostname() != "postgres" {
		t.Errorf("database_url.example %s does not match the postgres service (user %s, db %s)", example, pg["POSTGRES_USER"], pg["POSTGRES_DB"])
	}
}

// TestComposeProbesMatchListeners: healthcheck URLs hit the ports the
// processes listen on (HTTP_ADDR for the gateway, METRICS_ADDR otherwise).
func TestComposeProbesMatchListeners(t *testing.T) {
	t.Parallel()
	p := mustCompose(t)
	c := mustCode(t)
	urlRe := regexp.MustCompile(`https?://[^\s"']+`)
	for name, sub := range components {
		s := p.Services[name]
		if s.HealthCheck == nil || sub == "migrate" {
			continue
		}
		env := envOf(s)
		addrVar, path := "METRICS_ADDR", "/healthz"
		if sub == "gateway" {
			addrVar, path = "HTTP_ADDR", "/readyz"
		}
		addr := env[addrVar]
		if addr == "" {
			addr = c.defaultOf(t, addrVar)
		}
		raw := urlRe.FindString(strings.Join(s.HealthCheck.Test, " "))
		u, err := url.Parse(raw)
		if err != nil || raw == "" {
			t.Errorf("%s healthcheck %v has no URL", name, s.HealthCheck.Test)
			continue
		}
		if u.Port() != addrPort(t, addr) || u.Path != path {
			t.Errorf("%s healthcheck %s, want port %s (%s=%s) and path %s", name, raw, addrPort(t, addr), addrVar, addr, path)
		}
	}
	// The published gateway port is the one it listens on.
	gw := p.Services["gateway"]
	httpPort := addrPort(t, envOr(envOf(gw), "HTTP_ADDR", c.defaultOf(t, "HTTP_ADDR")))
	if len(gw.Ports) == 0 || gw.Ports[0].Target != mustUint(t, httpPort) {
		t.Errorf("gateway ports %+v, want target %s", gw.Ports, httpPort)
	}
}

func envOr(env map[string]string, k, def string) string {
	if v := env[k]; v != "" {
		return v
	}
	return def
}

func mustUint(t *testing.T, s string) uint32 {
	t.Helper()
	var n uint32
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("not a port: %q", s)
		}
		n = n*10 + uint32(r-'0')
	}
	return n
}

// TestOtelCollectorConfig: the mounted config exists, receives OTLP on the
// port the components export to, and sends traces to the jaeger service.
func TestOtelCollectorConfig(t *testing.T) {
	t.Parallel()
	p := mustCompose(t)
	col := p.Services["otel-collector"]
	var mounted string
	for _, v := range col.Volumes {
		if v.Type == types.VolumeTypeBind && strings.HasSuffix(v.Source, filepath.Join("deploy", "otel-collector.yaml")) {
			mounted = v.Target
		}
	}
	if mounted == "" || !slices.ContainsFunc(col.Command, func(a string) bool { return strings.HasSuffix(a, mounted) }) {
		t.Errorf("otel-collector does not run with deploy/otel-collector.yaml (volumes %+v, command %v)", col.Volumes, col.Command)
	}
	var cfg struct {
		Receivers  map[string]map[string]any `json:"receivers"`
		Processors map[string]any            `json:"processors"`
		Exporters  map[string]struct {
			Endpoint string `json:"endpoint"`
		} `json:"exporters"`
		Service struct {
			Pipelines map[string]struct {
				Receivers, Processors, Exporters []string
			} `json:"pipelines"`
		} `json:"service"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(root, "deploy", "otel-collector.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	traces, ok := cfg.Service.Pipelines["traces"]
	if !ok {
		t.Fatal("no traces pipeline")
	}
	for _, r := range traces.Receivers {
		if _, ok := cfg.Receivers[r]; !ok {
			t.Errorf("pipeline receiver %s not defined", r)
		}
	}
	for _, pr := range traces.Processors {
		if _, ok := cfg.Processors[pr]; !ok {
			t.Errorf("pipeline processor %s not defined", pr)
		}
	}
	toJaeger := false
	for _, e := range traces.Exporters {
		ex, ok := cfg.Exporters[e]
		if !ok {
			t.Errorf("pipeline exporter %s not defined", e)
			continue
		}
		host, _, _ := strings.Cut(ex.Endpoint, ":")
		if strings.HasPrefix(e, "otlp") && host == "jaeger" {
			toJaeger = true
		}
	}
	if _, ok := p.Services["jaeger"]; !ok || !toJaeger {
		t.Errorf("traces are not exported over OTLP to the jaeger service: %+v", cfg.Exporters)
	}
	u, _ := url.Parse(envOf(p.Services["gateway"])["OTEL_EXPORTER_OTLP_ENDPOINT"])
	grpc, _ := cfg.Receivers["otlp"]["protocols"].(map[string]any)["grpc"].(map[string]any)
	if ep, _ := grpc["endpoint"].(string); !strings.HasSuffix(ep, ":"+u.Port()) {
		t.Errorf("collector OTLP gRPC endpoint %q, components export to port %s", ep, u.Port())
	}
}

// TestDockerfile: multi-stage, Go version of go.mod, non-root runtime, one
// binary as the entrypoint, no secret baked in.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	df := string(mustRead(t, filepath.Join(root, "deploy", "Dockerfile")))
	var froms []string
	user, entry := "", ""
	for _, line := range strings.Split(df, "\n") {
		line = strings.TrimSpace(line)
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(line, "#") {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			froms = append(froms, line)
			user = "" // per stage
		case "USER":
			user = fields[1]
		case "ENTRYPOINT":
			entry = strings.TrimSpace(strings.TrimPrefix(line, fields[0]))
		case "ENV", "ARG":
			if regexp.MustCompile(`(?i)password|token|secret|DATABASE_URL`).MatchString(line) {
				t.Errorf("secret-looking %s in the image: %s", fields[0], line)
			}
		}
	}
	if len(froms) < 2 || !strings.Contains(froms[0], "golang:") {
		t.Errorf("want a Go build stage and a runtime stage, got %v", froms)
	}
	if last := froms[len(froms)-1]; strings.Contains(last, "golang") {
		t.Errorf("runtime stage is the Go toolchain image: %s", last)
	}
	if user == "" || user == "root" || strings.HasPrefix(user, "0") {
		t.Errorf("runtime stage runs as %q, want a non-root user", user)
	}
	if entry != `["orderpipe"]` {
		t.Errorf(`ENTRYPOINT %s, want ["orderpipe"]`, entry)
	}
	gomod := string(mustRead(t, filepath.Join(root, "go.mod")))
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	argVer := regexp.MustCompile(`ARG GO_VERSION=(\S+)`).FindStringSubmatch(df)
	if goVer == nil || argVer == nil || argVer[1] != goVer[1] {
		t.Errorf("Dockerfile GO_VERSION %v does not match go.mod's go %v", argVer, goVer)
	}
}

// TestDockerContextBuilds applies deploy/Dockerfile.dockerignore to the
// repo, as `docker build -f deploy/Dockerfile .` would, and checks that what
// is left holds everything the build stage compiles (no Docker here).
func TestDockerContextBuilds(t *testing.T) {
	t.Parallel()
	var patterns []string
	for _, line := range strings.Split(string(mustRead(t, filepath.Join(root, "deploy", "Dockerfile.dockerignore"))), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimPrefix(line, "/"))
		}
	}
	ignored := func(rel string) bool {
		for _, p := range patterns {
			if sub, ok := strings.CutPrefix(p, "**/"); ok {
				if m, _ := filepath.Match(sub, filepath.Base(rel)); m {
					return true
				}
				continue
			}
			if m, _ := filepath.Match(p, rel); m {
				return true
			}
		}
		return false
	}
	ctx := t.TempDir()
	src := mustAbs(t, root)
	var copied []string
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if rel == "." {
			return nil
		}
		if ignored(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(ctx, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		copied = append(copied, rel)
		return os.WriteFile(filepath.Join(ctx, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range copied {
		if strings.HasPrefix(rel, "deploy"+string(filepath.Separator)) && slices.Contains(strings.Split(rel, string(filepath.Separator)), "secrets") ||
			strings.HasPrefix(rel, ".git"+string(filepath.Separator)) {
			t.Errorf("%s is in the build context", rel)
		}
	}
	// go list resolves every package and //go:embed pattern the build needs
	// (what a trimmed context would lose) without compiling: a full build
	// in a fresh directory takes minutes on a busy 2-core machine.
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.EmbedFiles}}", ".")
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the build context misses what the build needs: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "orderpipe/schemas") {
		t.Errorf("go list found no orderpipe/schemas among the dependencies:\n%s", out)
	}
}

// mountOf finds the bind mount of service s whose target is target.
func mountOf(s types.ServiceConfig, target string) (types.ServiceVolumeConfig, bool) {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == target {
			return v, true
		}
	}
	return types.ServiceVolumeConfig{}, false
}

// checkMount: service s mounts the repo file rel (read-only) at target.
func checkMount(t *testing.T, s types.ServiceConfig, rel, target string) {
	t.Helper()
	v, ok := mountOf(s, target)
	switch {
	case !ok:
		t.Errorf("%s does not mount %s at %s", s.Name, rel, target)
	case filepath.Clean(v.Source) != filepath.Join(mustAbs(t, root), rel):
		t.Errorf("%s mounts %s at %s, want %s", s.Name, v.Source, target, rel)
	case !v.ReadOnly:
		t.Errorf("%s mounts %s writable", s.Name, target)
	}
	if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
		t.Errorf("%s mounts %s, which does not exist", s.Name, rel)
	}
}

func published(s types.ServiceConfig, port uint32) bool {
	return slices.ContainsFunc(s.Ports, func(p types.ServicePortConfig) bool { return p.Target == port && p.Published != "" })
}

// TestComposeMonitoring: `docker compose up` runs Prometheus with the rules of
// deploy/prometheus scraping every component on the port it listens on, and
// Grafana with its datasource and the orderpipe dashboard provisioned.
func TestComposeMonitoring(t *testing.T) {
	t.Parallel()
	p := mustCompose(t)
	prom, ok := p.Services["prometheus"]
	if !ok {
		t.Fatal("no prometheus service")
	}
	const promDir = "/etc/prometheus"
	var configTarget string
	for _, arg := range prom.Command {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			configTarget = v
		}
	}
	if configTarget != promDir+"/prometheus.yml" {
		t.Errorf("prometheus --config.file=%q, want %s/prometheus.yml", configTarget, promDir)
	}
	checkMount(t, prom, "deploy/prometheus/prometheus.yml", promDir+"/prometheus.yml")
	if !published(prom, 9090) || prom.HealthCheck == nil {
		t.Errorf("prometheus: port 9090 published %v, healthcheck %v", published(prom, 9090), prom.HealthCheck != nil)
	}
	var cfg struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			JobName      string `json:"job_name"`
			DNSSDConfigs []struct {
				Names []string `json:"names"`
				Port  int      `json:"port"`
			} `json:"dns_sd_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(root, "deploy", "prometheus", "prometheus.yml")), &cfg); err != nil {
		t.Fatal(err)
	}
	// Each rule file resolves (relative to the config) to the repo's file.
	if len(cfg.RuleFiles) == 0 {
		t.Error("prometheus.yml loads no rule files")
	}
	for _, rf := range cfg.RuleFiles {
		checkMount(t, prom, filepath.Join("deploy", "prometheus", filepath.Base(rf)), filepath.Join(promDir, rf))
	}
	// Every component is scraped, by service name, on its metrics port.
	scraped := map[string]int{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, sd := range sc.DNSSDConfigs {
			for _, n := range sd.Names {
				scraped[n] = sd.Port
			}
		}
	}
	for name, sub := range components {
		if sub == "migrate" {
			continue // a one-shot: nothing to scrape
		}
		env := envOf(p.Services[name])
		addr := envOr(env, "METRICS_ADDR", ":9090")
		if sub == "gateway" {
			addr = envOr(env, "HTTP_ADDR", ":8080")
		}
		want := addrPort(t, addr)
		if got, ok := scraped[name]; !ok || fmt.Sprint(got) != want {
			t.Errorf("prometheus scrapes %s on port %d (scraped: %v), want %s (where it serves /metrics)", name, got, ok, want)
		}
	}

	graf, ok := p.Services["grafana"]
	if !ok {
		t.Fatal("no grafana service")
	}
	checkMount(t, graf, "deploy/grafana/provisioning", "/etc/grafana/provisioning")
	if !published(graf, 3000) || graf.HealthCheck == nil {
		t.Errorf("grafana: port 3000 published %v, healthcheck %v", published(graf, 3000), graf.HealthCheck != nil)
	}
	if graf.DependsOn["prometheus"].Condition != types.ServiceConditionHealthy {
		t.Errorf("grafana does not wait for a healthy prometheus")
	}
	// The dashboard provider reads the folder the dashboard is mounted in.
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(root, "deploy", "grafana", "provisioning", "dashboards", "orderpipe.yml")), &prov); err != nil {
		t.Fatal(err)
	}
	if len(prov.Providers) != 1 {
		t.Fatalf("dashboard providers: %+v", prov.Providers)
	}
	dashTarget := prov.Providers[0].Options.Path + "/orderpipe.json"
	checkMount(t, graf, "deploy/grafana/orderpipe.json", dashTarget)
	if home := envOf(graf)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != dashTarget {
		t.Errorf("home dashboard %q, want %s", home, dashTarget)
	}
	// The datasource is the prometheus service, with the uid the dashboard selects.
	var ds struct {
		Datasources []struct {
			UID  string `json:"uid"`
			Type string `json:"type"`
			URL  string `json:"url"`
		} `json:"datasources"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(root, "deploy", "grafana", "provisioning", "datasources", "prometheus.yml")), &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds.Datasources) != 1 {
		t.Fatalf("datasources: %+v", ds.Datasources)
	}
	u, err := url.Parse(ds.Datasources[0].URL)
	if err != nil || ds.Datasources[0].Type != "prometheus" || u.Hostname() != "prometheus" || u.Port() != "9090" {
		t.Errorf("datasource %+v, want type prometheus at http://prometheus:9090", ds.Datasources[0])
	}
	if want := mustDashboard(t).defaultDatasource(); ds.Datasources[0].UID != want {
		t.Errorf("datasource uid %q, but the dashboard selects %q", ds.Datasources[0].UID, want)
	}
}
