package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"orderpipe/pkg/testenv"
)

// Stamps of the binary the tests build, as `make build` stamps its own.
const (
	builtVersion = "v9.9.9-clitest"
	builtCommit  = "0123456789abcdef0123456789abcdef01234567"
)

// binDir holds the production binary (no build tags) the tests run, built
// once, on first use, under binMu (parallel tests ask for it too).
var (
	binMu  sync.Mutex
	binDir string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// mustBinary builds the production binary (what `make build` and the
// Dockerfile build: no tags) once per test run and returns its path.
func mustBinary(t *testing.T) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if binDir == "" {
		dir, err := os.MkdirTemp("", "orderpipe-bin-")
		if err != nil {
			t.Fatal(err)
		}
		binDir = dir
	}
	bin := filepath.Join(binDir, "orderpipe")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	ldflags := "-X orderpipe/pkg/version.version=" + builtVersion + " -X orderpipe/pkg/version.commit=" + builtCommit +
		" -X orderpipe/pkg/version.modified=true"
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building orderpipe: %v\n%s", err, out)
	}
	return bin
}

// result is one run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// cleanEnv is the test process's environment without any variable orderpipe
// reads (nor its _FILE form), plus env: what a run sees is what the test set.
func cleanEnv(env ...string) []string {
	names := map[string]bool{"REDIS_URL": true}
	for _, e := range settings() {
		names[e.Name] = true
	}
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if names[name] || names[strings.TrimSuffix(name, "_FILE")] {
			continue
		}
		out = append(out, kv)
	}
	// The production build's gateway and worker need an event signing key;
	// a test that sets its own (or none: EVENT_SIGNING_KEY=) overrides this
	// one, the last of a name being the one a process sees.
	out = append(out, "EVENT_SIGNING_KEY=tests-event-signing-key")
	return append(out, env...)
}

// runBinary runs the binary to its end. The context only keeps a hung run
// from hanging the test run; no assertion is about time.
func runBinary(t *testing.T, env []string, args ...string) result {
	t.Helper()
	bin := mustBinary(t) // built before the run's clock starts: a build on a busy machine is slow
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		res.code = exit.ExitCode()
	default:
		t.Fatalf("orderpipe %s: %v\n%s", strings.Join(args, " "), err, res)
	}
	return res
}

// unsetenv removes a variable for the test and restores it afterwards.
func unsetenv(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		t.Setenv(n, "")
		os.Unsetenv(n)
	}
}

// freeAddr is a 127.0.0.1 address nothing listened on a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// deadEnds points every dependency at an address where nothing listens, so
// a command that touched one would fail.
func deadEnds(t *testing.T) []string {
	closed := freeAddr(t)
	return []string{"DATABASE_URL=postgres://postgres@" + closed + "/orderpipe?sslmode=disable", "REDIS_ADDR=" + closed,
		"KAFKA_BROKERS=" + closed, "HTTP_ADDR=" + closed, "METRICS_ADDR=" + closed, "OTEL_EXPORTER_OTLP_ENDPOINT=http://" + closed}
}

// TestEveryCommandRuns: every command in the table that help, usage and
// argument checks come from is answered by preflight or has what runs it, and
// every target a command runs is a row of the targets table.
func TestEveryCommandRuns(t *testing.T) {
	answered := map[string]bool{"help": true, "env": true, "version": true}
	for _, c := range commands {
		if answered[c.name] == (c.main != nil || c.run != nil) {
			t.Errorf("%s: answered by preflight %v, has a main or run %v", c.name, answered[c.name], c.main != nil || c.run != nil)
		}
	}
	table := targets(&config{})
	for name, tg := range table {
		for _, d := range tg.Deps {
			if _, ok := table[d]; !ok {
				t.Errorf("target %s depends on %q, which is no target", name, d)
			}
		}
	}
	if got := table.Resolve(components{"all"}); !slices.Equal(got, []string{"local", "gateway", "worker", "closer", "relay", "webhook", "all"}) {
		t.Errorf("all resolves to %v", got)
	}
}

// testHelpTouchesNothing: `orderpipe <command> --help` and `-h`, and
// `orderpipe help <command>`, print that command's usage on stdout and exit
// 0, whatever the configuration: every dependency points at a closed port,
// and a bad setting would stop any command that read the configuration.
func testHelpTouchesNothing(t *testing.T, _ engine) {
	t.Parallel()
	env := append(deadEnds(t), "WORKER_BATCH_SIZE=not-a-number", "ADMIN_TOKEN_FILE=/nonexistent/admin_token")
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
				res := runBinary(t, env, args...)
				if res.code != 0 {
					t.Errorf("orderpipe %s: %s", strings.Join(args, " "), res)
					continue
				}
				if want := "usage: orderpipe " + c.name; !strings.HasPrefix(res.stdout, want) {
					t.Errorf("orderpipe %s: stdout does not start with %q:\n%s", strings.Join(args, " "), want, res)
				}
				if res.stderr != "" {
					t.Errorf("orderpipe %s wrote to stderr (a log line: it ran something):\n%s", strings.Join(args, " "), res)
				}
			}
		})
	}
	// Flags after the help flag are not looked at either.
	res := runBinary(t, env, "reconciler", "--once", "--fix", "-h")
	if res.code != 0 || !strings.HasPrefix(res.stdout, "usage: orderpipe reconciler") {
		t.Errorf("reconciler --once --fix -h: %s", res)
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		res := runBinary(t, env, args...)
		if res.code != 0 || !strings.HasPrefix(res.stdout, "usage: orderpipe <command>") {
			t.Errorf("orderpipe %s: %s", args[0], res)
		}
		for _, c := range commands {
			if !strings.Contains(res.stdout, "\n  "+c.name+" ") {
				t.Errorf("orderpipe %s does not list %s", args[0], c.name)
			}
		}
	}
}

// testBadCommandLinesExit2: an unknown flag names itself, a stray argument
// or an unknown command is named, the usage follows on stderr, exit 2 —
// before anything is touched.
func testBadCommandLinesExit2(t *testing.T, _ engine) {
	t.Parallel()
	env := deadEnds(t)
	for _, c := range commands {
		if c.name == "help" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			res := runBinary(t, env, c.name, "--no-such-flag")
			if res.code != 2 || !strings.Contains(res.stderr, "-no-such-flag") || !strings.Contains(res.stderr, "usage: orderpipe "+c.name) {
				t.Errorf("%s --no-such-flag: want exit 2 naming the flag, then the usage: %s", c.name, res)
			}
			if res.stdout != "" {
				t.Errorf("%s --no-such-flag wrote to stdout: %s", c.name, res)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "orderpipe: no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"migrate", "now"}, `orderpipe migrate: unexpected argument "now"`},
		{[]string{"reconciler", "--once", "extra"}, `orderpipe reconciler: unexpected argument "extra"`},
		{[]string{"locate"}, "orderpipe locate: want exactly one requestId"},
		{[]string{"locate", "r-1", "--activity", "0", "--item", "0"}, "--activity and --item must be positive"},
		{[]string{"locate", "r-1", "--activity", "1", "--item", "0"}, "--activity and --item must be positive"},
	} {
		res := runBinary(t, env, tc.args...)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) || !strings.Contains(res.stderr, "usage: orderpipe") {
			t.Errorf("orderpipe %s: want exit 2 and %q, then the usage: %s", strings.Join(tc.args, " "), tc.want, res)
		}
	}
	// The load tool is test tooling: the production binary names the build that has it.
	if res := runBinary(t, env, "bench", "-c", "1"); res.code != 2 || !strings.Contains(res.stderr, "only in development builds (make build-dev") {
		t.Errorf("orderpipe bench in the production build: want exit 2 naming the development build: %s", res)
	}
	if res := runBinary(t, append(env, "KAFKA_BROKERS="), "topics"); res.code != 2 || !strings.Contains(res.stderr, "KAFKA_BROKERS is empty") {
		t.Errorf("orderpipe topics without KAFKA_BROKERS: want exit 2 naming it: %s", res)
	}
	// A store that refuses the login: could not run, as the reconciler says it.
	refused, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	refused.User = url.UserPassword(testenv.UniqueName("nobody"), "x")
	if res := runBinary(t, append(env, "DATABASE_URL="+refused.String()), "migrate"); res.code != 2 ||
		!strings.Contains(res.stderr, "could not run") {
		t.Errorf("orderpipe migrate with a refused login: want exit 2, could not run: %s", res)
	}
	// A bad setting is a run that never started, also for the commands
	// whose exit 1 means something (drift, an unknown requestId).
	for _, args := range [][]string{{"reconciler", "--once"}, {"locate", "r-1"}, {"dlq", "list"}, {"events"}, {"topics"}} {
		res := runBinary(t, append(env, "RECONCILE_INTERVAL=abc", "KAFKA_BROKERS=127.0.0.1:1"), args...)
		if res.code != 2 || !strings.Contains(res.stderr, "bad configuration") || !strings.Contains(res.stderr, "RECONCILE_INTERVAL") {
			t.Errorf("orderpipe %s with RECONCILE_INTERVAL=abc: want exit 2 naming the setting: %s", strings.Join(args, " "), res)
		}
	}
}

// TestBadSettingsStopBeforeAnything: a listen address, a Redis address or a
// database url that cannot work is a bad setting like any other — exit 2
// naming it, before `all` has created or migrated its database — and so is
// a component that needs a broker started without KAFKA_BROKERS.
func TestBadSettingsStopBeforeAnything(t *testing.T) {
	name := testenv.UniqueName("never")
	u, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	env := append(deadEnds(t), "DATABASE_URL="+u.String())
	for _, tc := range []struct {
		cmd, setting, value string
	}{
		{"all", "HTTP_ADDR", "nonsense"},
		{"all", "HTTP_ADDR", "127.0.0.1:99999"},
		{"all", "ADMIN_ADDR", "nonsense"},
		{"all", "PPROF_ADDR", "localhost"},
		{"closer", "METRICS_ADDR", "nonsense"},
		{"closer", "METRICS_ADDR", ""},
		{"migrate", "REDIS_ADDR", "nonsense"},
		{"migrate", "REDIS_ADDR", "127.0.0.1:6379,redis"},
		{"all", "DATABASE_URL", "garbage"},
		{"migrate", "DATABASE_URL", "postgres://postgres@127.0.0.1:notaport/x"},
		{"gateway", "KAFKA_BROKERS", ""},
		{"worker", "KAFKA_BROKERS", ""},
		{"relay", "KAFKA_BROKERS", ""},
		{"all", "KAFKA_BROKERS", ""}, // the production build has no embedded broker
		{"worker", "WORKER_BATCH_SIZE", "0"},
		{"gateway", "EVENT_SIGNING_KEY", ""}, // the production build signs with no public key
		{"worker", "EVENT_SIGNING_KEY", ""},
		{"all", "EVENT_SIGNING_KEY", ""},
	} {
		res := runBinary(t, append(env, tc.setting+"="+tc.value), tc.cmd)
		if res.code != 2 || !strings.Contains(res.stderr, "bad configuration") || !strings.Contains(res.stderr, tc.setting) {
			t.Errorf("orderpipe %s with %s=%q: want exit 2, bad configuration naming it: %s", tc.cmd, tc.setting, tc.value, res)
		}
		if strings.Contains(res.stderr, `"msg":"starting"`) {
			t.Errorf("orderpipe %s with %s=%q started before it stopped: %s", tc.cmd, tc.setting, tc.value, res)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Cleanup(func() { _ = testenv.DropDatabase(context.Background(), testenv.DatabaseURL(), name) })
	if err := testenv.PingPostgres(ctx, u.String()); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("database %s after the bad starts: want it never created, ping said %v", name, err)
	}
}

// testLogLinesAreJSON: with Redis down, every line the reconciler (a
// scheduled job: its stderr is its log) writes to stderr is a JSON record,
// go-redis's own lines included (its default is plain text).
func testLogLinesAreJSON(t *testing.T, _ engine) {
	t.Parallel()
	env := append(deadEnds(t), "DATABASE_URL="+testenv.MustDatabase(t).URL) // Redis is the one down
	res := runBinary(t, env, "reconciler", "--once")
	if res.code != 2 || res.stderr == "" {
		t.Fatalf("orderpipe reconciler --once with Redis down: %s, want exit 2", res)
	}
	for _, line := range strings.Split(strings.TrimSpace(res.stderr), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("orderpipe reconciler --once wrote a line that is not a JSON record: %q", line)
		}
	}
}

// testVersion: `orderpipe version` (and --version) print what the build
// stamped and the Go version, touching nothing.
func testVersion(t *testing.T, _ engine) {
	t.Parallel()
	env := append(deadEnds(t), "WORKER_BATCH_SIZE=not-a-number")
	for _, arg := range []string{"version", "--version"} {
		res := runBinary(t, env, arg)
		want := fmt.Sprintf("version   %s\ncommit    %s\nmodified  true\ngo        %s\n", builtVersion, builtCommit, runtime.Version())
		if res.code != 0 || res.stdout != want {
			t.Errorf("orderpipe %s: want\n%s\ngot %s", arg, want, res)
		}
	}
}

// testBuildInfoMetric: a running process (here a closer, on the test
// Postgres and Redis) exports orderpipe_build_info with the build's labels.
func testBuildInfoMetric(t *testing.T, _ engine) {
	t.Parallel()
	db := testenv.MustDatabase(t)
	c := startCloser(t, "DATABASE_URL="+db.URL, "REDIS_ADDR="+testenv.RedisAddr(), "REDIS_KEY_PREFIX="+testenv.UniqueName("t")+":")
	body := c.mustAnswerOK(t, "http://"+c.metrics+"/metrics")
	c.mustStop(t)
	want := fmt.Sprintf(`orderpipe_build_info{commit=%q,goversion=%q,version=%q} 1`, builtCommit, runtime.Version(), builtVersion)
	if !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "build_info"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// testProductionBuildHasNoEmbeddedBroker: `all` without KAFKA_BROKERS and
// `kafka` say what to do, before touching anything (every dependency is a
// closed port: touching one would fail with another message).
func testProductionBuildHasNoEmbeddedBroker(t *testing.T, _ engine) {
	t.Parallel()
	env := deadEnds(t)
	env = env[:len(env):len(env)]
	for i, kv := range env {
		if strings.HasPrefix(kv, "KAFKA_BROKERS=") {
			env = append(env[:i:i], env[i+1:]...)
			break
		}
	}
	// `all` without KAFKA_BROKERS is a bad setting here (exit 2); `kafka`
	// is a command this build cannot run (exit 1).
	for cmd, code := range map[string]int{"all": 2, "kafka": 1} {
		res := runBinary(t, env, cmd)
		if res.code != code || !strings.Contains(res.stderr, "the embedded broker is not in this build: set KAFKA_BROKERS, or build with -tags dev") {
			t.Errorf("orderpipe %s without KAFKA_BROKERS: %s", cmd, res)
		}
		for _, touched := range []string{"postgres", "redis", "database"} {
			if strings.Contains(strings.ToLower(res.stderr), touched) {
				t.Errorf("orderpipe %s touched %s before refusing: %s", cmd, touched, res)
			}
		}
	}
}

// testProductionBuildHasNoSteppedClock: DEV_CLOCK_OFFSET_FILE (the chaos
// suite's clock steps) is refused by the production build before anything
// is touched, rather than ignored.
func testProductionBuildHasNoSteppedClock(t *testing.T, _ engine) {
	t.Parallel()
	env := append(deadEnds(t), "DEV_CLOCK_OFFSET_FILE="+filepath.Join(t.TempDir(), "clock"))
	res := runBinary(t, env, "gateway")
	if res.code != 1 || !strings.Contains(res.stderr, "a stepped clock (DEV_CLOCK_OFFSET_FILE) exists only in development builds") {
		t.Errorf("orderpipe gateway with DEV_CLOCK_OFFSET_FILE: %s", res)
	}
}

// TestReconcilerLoopSaysStopped: the reconciler's loop, stopped by SIGTERM,
// exits 0 and ends its log with "stopped", as every long-running command.
func TestReconcilerLoopSaysStopped(t *testing.T) {
	db, r := testenv.MustDatabase(t), testenv.MustRedis(t)
	cmd := exec.Command(mustBinary(t), "reconciler")
	cmd.Env = cleanEnv("DATABASE_URL="+db.URL, "REDIS_ADDR="+testenv.RedisAddr(), "REDIS_KEY_PREFIX="+r.Prefix, "METRICS_ADDR=127.0.0.1:0")
	var stderr testenv.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the loop started", func() bool { return strings.Contains(stderr.String(), "reconciler starting") })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("reconciler loop after SIGTERM: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `"msg":"stopped"`) {
		t.Errorf("last line %s, want stopped", last)
	}
}
