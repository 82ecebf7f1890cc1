package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// root is the module root, seen from this package's directory.
const root = ".."

// code is what the deployment files must agree with, read from the source:
// package main cannot be imported, so the settings every package declares
// (setting.Var{Name, Default, ...}), the root's command table and the
// subcommands' flags are parsed from the module's files.
type code struct {
	// env is every declared setting: name → default.
	env map[string]envDefault
	// direct are names read with os.Getenv/os.LookupEnv outside the table
	// (e.g. LOG_LEVEL in pkg/telemetry).
	direct map[string]bool
	// commands are the first arguments run accepts (the commands table).
	commands map[string]bool
	// flags are each subcommand's flags (from flag.NewFlagSet("<sub>", ...)).
	flags map[string]map[string]bool
}

type envDefault struct {
	value   string // the literal default; "" with expr set means an expression
	literal bool
}

// empty reports a default that is the empty string.
func (d envDefault) empty() bool { return d.literal && d.value == "" }

var (
	codeOnce sync.Once
	codeVal  code
	codeErr  []string
)

// mustCode parses the module once per test binary.
func mustCode(t testing.TB) code {
	t.Helper()
	codeOnce.Do(func() { codeVal, codeErr = parseCode() })
	if len(codeErr) > 0 {
		t.Fatalf("reading the code: %s", strings.Join(codeErr, "; "))
	}
	return codeVal
}

func parseCode() (code, []string) {
	c := code{env: map[string]envDefault{}, direct: map[string]bool{}, commands: map[string]bool{}, flags: map[string]map[string]bool{}}
	var errs []string
	fset := token.NewFileSet()
	rootFiles, _ := filepath.Glob(filepath.Join(root, "*.go"))
	for _, path := range rootFiles {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		collectCommands(f, c.commands)
	}
	// Settings, flags and direct reads anywhere in the module's non-test
	// code, except the test helpers (pkg/testenv reads TEST_*) and the
	// benchmark harness.
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "testenv" || name == "bench" || name == "deploy") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			errs = append(errs, err.Error())
			return nil
		}
		collectSettings(f, c.env)
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
				collectFlags(fn, c.flags)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv") {
					if s, ok := stringLit(call.Args[0]); ok {
						c.direct[s] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if len(c.env) == 0 {
		errs = append(errs, "no setting.Var declarations found in the module")
	}
	if len(c.commands) == 0 {
		errs = append(errs, "no commands table found in the root package")
	}
	return c, errs
}

// collectSettings reads every setting declaration, a composite literal with
// the fields Name (a string literal) and Default: setting.Var{Name: ...,
// Default: ..., Help: ...}, or such an element of a []setting.Var.
func collectSettings(f *ast.File, into map[string]envDefault) {
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		var name string
		var def ast.Expr
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			switch key, _ := kv.Key.(*ast.Ident); {
			case key == nil:
			case key.Name == "Name":
				name, _ = stringLit(kv.Value)
			case key.Name == "Default":
				def = kv.Value
			}
		}
		if name != "" && def != nil {
			value, literal := stringLit(def)
			into[name] = envDefault{value: value, literal: literal}
		}
		return true
	})
}

// collectCommands reads the names of `var commands = []command{{name: "..."}, ...}`.
func collectCommands(f *ast.File, into map[string]bool) {
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range gd.Specs {
			vs, ok := s.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "commands" || len(vs.Values) != 1 {
				continue
			}
			lit, ok := vs.Values[0].(*ast.CompositeLit)
			if !ok {
				continue
			}
			for _, e := range lit.Elts {
				row, ok := e.(*ast.CompositeLit)
				if !ok {
					continue
				}
				for _, f := range row.Elts {
					if kv, ok := f.(*ast.KeyValueExpr); ok {
						if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "name" {
							if s, ok := stringLit(kv.Value); ok {
								into[s] = true
							}
						}
					}
				}
			}
		}
	}
}

// collectFlags finds `fs := flag.NewFlagSet("<sub>", ...)` and the names of
// fs.Bool/String/Int/Duration/... calls in the same function.
func collectFlags(fn *ast.FuncDecl, into map[string]map[string]bool) {
	sets := map[string]string{} // variable → subcommand
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
			return true
		}
		call, ok := as.Rhs[0].(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewFlagSet" {
			if sub, ok := stringLit(call.Args[0]); ok {
				if id, ok := as.Lhs[0].(*ast.Ident); ok {
					sets[id.Name] = sub
				}
			}
		}
		return true
	})
	if len(sets) == 0 {
		return
	}
	defs := map[string]bool{"Bool": true, "String": true, "Int": true, "Int64": true, "Uint": true, "Float64": true, "Duration": true,
		"BoolVar": true, "StringVar": true, "IntVar": true, "DurationVar": true, "Func": true}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !defs[sel.Sel.Name] {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		sub, ok := sets[id.Name]
		if !ok {
			return true
		}
		argIdx := 0
		if strings.HasSuffix(sel.Sel.Name, "Var") {
			argIdx = 1
		}
		if len(call.Args) > argIdx {
			if name, ok := stringLit(call.Args[argIdx]); ok {
				if into[sub] == nil {
					into[sub] = map[string]bool{}
				}
				into[sub][name] = true
			}
		}
		return true
	})
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// knownEnv reports whether a deployment may set name: a table variable, its
// _FILE form (config.go reads secrets from files), a variable read directly,
// or the OpenTelemetry SDK's OTEL_* variables.
func (c code) knownEnv(name string) bool {
	if _, ok := c.env[name]; ok || c.direct[name] || strings.HasPrefix(name, "OTEL_") {
		return true
	}
	if base, ok := strings.CutSuffix(name, "_FILE"); ok {
		_, ok := c.env[base]
		return ok
	}
	return false
}

// checkArgs reports what is wrong with a container's arguments: the first
// must be a subcommand, the rest that subcommand's flags.
func (c code) checkArgs(args []string) []string {
	if len(args) == 0 {
		return []string{"no arguments: the image's default command is `help`"}
	}
	var bad []string
	if !c.commands[args[0]] {
		bad = append(bad, "unknown subcommand "+strconv.Quote(args[0])+" (known: "+strings.Join(sortedKeys(c.commands), ", ")+")")
	}
	for _, a := range args[1:] {
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		if !strings.HasPrefix(a, "-") || !c.flags[args[0]][name] {
			bad = append(bad, "subcommand "+args[0]+" has no flag "+strconv.Quote(a))
		}
	}
	return bad
}

// defaultOf is the table default of a variable the test relies on.
func (c code) defaultOf(t testing.TB, name string) string {
	t.Helper()
	d, ok := c.env[name]
	if !ok || !d.literal {
		t.Fatalf("no setting declares a literal default for %s", name)
	}
	return d.value
}

// needs are the variables each component must be given by a deployment:
// their defaults (127.0.0.1, empty) only make sense on a developer machine.
// Giving NAME_FILE counts as giving NAME.
var needs = map[string][]string{
	"migrate":    {"DATABASE_URL"},
	"gateway":    {"DATABASE_URL", "REDIS_ADDR", "KAFKA_BROKERS", "ADMIN_TOKEN", "EVENT_SIGNING_KEY"},
	"worker":     {"DATABASE_URL", "REDIS_ADDR", "KAFKA_BROKERS", "EVENT_SIGNING_KEY"},
	"closer":     {"DATABASE_URL", "REDIS_ADDR"},
	"reconciler": {"DATABASE_URL", "REDIS_ADDR"},
	"webhook":    {"DATABASE_URL"},
}

// emptyByDesign are table variables whose empty default is the right
// production value. Any other variable with an empty default must be in
// needs: a new one makes TestEveryVariableHasADefaultOrIsGiven fail until
// someone decides which it is.
var emptyByDesign = map[string]string{
	"REDIS_KEY_PREFIX":      "the deployment owns its Redis; prefixes isolate tests",
	"API_TOKENS":            "the order API is reached by the storefront backend on a private network",
	"ADMIN_ADDR":            "admin API on HTTP_ADDR (the Kubernetes base moves it to :8081)",
	"KAFKA_EMBEDDED_DIR":    "only `orderpipe all` reads it (the embedded broker); deployments use real Kafka",
	"PPROF_ADDR":            "profiles expose internals: off unless someone measuring turns them on",
	"DEV_CLOCK_OFFSET_FILE": "a fault-injection hook of dev builds (the nemesis's clock steps); production builds refuse it",
	"WEBHOOK_URLS":          "webhooks are opt-in: no endpoint is known until a storefront gives one (docs/events.md#webhooks)",
	"WEBHOOK_SECRET":        "needed only with WEBHOOK_URLS, which refuses to start without it (exit 2)",
	"PUSHGATEWAY_URL":       "only a --once pass pushes its metrics (the Kubernetes reconciler CronJob sets it, deploy/k8s_test.go checks it); the compose reconciler loops and is scraped on METRICS_ADDR",
	// TLS and authentication: what the platform's Redis and Kafka require
	// (docs/deploy.md); the compose stack and the manifests' defaults
	// reach them on a private network without.
	"REDIS_URL":            "REDIS_ADDR is the default form; REDIS_URL is for TLS, ACL users and credentials in one secret",
	"REDIS_USERNAME":       "Redis without ACL users: the default user",
	"REDIS_PASSWORD":       "Redis without requirepass on a private network",
	"REDIS_TLS_CA_FILE":    "the system's roots verify a rediss:// server unless a private CA is given",
	"REDIS_TLS_CERT_FILE":  "mutual TLS only where Redis requires client certificates",
	"REDIS_TLS_KEY_FILE":   "mutual TLS only where Redis requires client certificates",
	"KAFKA_TLS_CA_FILE":    "the system's roots verify the brokers unless a private CA is given",
	"TRACE_STORE_DIR":      "production exports spans over OTLP to a trace store; the local span files are for make run",
	"TRACE_QUERY_URL":      "locate reads traces from Jaeger only where one is reachable",
	"KAFKA_TLS_CERT_FILE":  "mutual TLS only where the brokers require client certificates",
	"KAFKA_TLS_KEY_FILE":   "mutual TLS only where the brokers require client certificates",
	"KAFKA_SASL_MECHANISM": "no SASL unless the brokers require it",
	"KAFKA_SASL_USERNAME":  "no SASL unless the brokers require it",
	"KAFKA_SASL_PASSWORD":  "no SASL unless the brokers require it",
}

// given reports whether env gives name, directly or as NAME_FILE (and
// REDIS_ADDR as REDIS_URL, its TLS and credentials form).
func given(env map[string]string, name string) bool {
	if v, ok := env[name]; ok && v != "" {
		return true
	}
	if name == "REDIS_ADDR" && given(env, "REDIS_URL") {
		return true
	}
	return env[name+"_FILE"] != ""
}

// addrPort is the port of a listen address such as ":8080".
func addrPort(t testing.TB, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return port
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCodeIsReadable guards the parsing itself: if the declarations or the
// command table change shape, the other tests must not pass by finding nothing.
func TestCodeIsReadable(t *testing.T) {
	t.Parallel()
	c := mustCode(t)
	for _, name := range []string{"DATABASE_URL", "REDIS_ADDR", "KAFKA_BROKERS", "ADMIN_TOKEN", "HTTP_ADDR", "METRICS_ADDR", "KAFKA_PARTITIONS", "RECONCILE_INTERVAL", "PUSHGATEWAY_URL"} {
		if _, ok := c.env[name]; !ok {
			t.Errorf("no setting declares %s", name)
		}
	}
	for cmd := range needs {
		if !c.commands[cmd] {
			t.Errorf("the commands table has no %q (found %v)", cmd, sortedKeys(c.commands))
		}
	}
	for _, f := range []string{"once", "fix", "json"} {
		if !c.flags["reconciler"][f] {
			t.Errorf("reconciler has no --%s flag (found %v)", f, sortedKeys(c.flags["reconciler"]))
		}
	}
	if !c.direct["LOG_LEVEL"] {
		t.Errorf("LOG_LEVEL (pkg/telemetry) not found among direct reads %v", sortedKeys(c.direct))
	}
	if bad := c.checkArgs([]string{"reconciler", "--once", "--nope"}); len(bad) != 1 {
		t.Errorf("checkArgs missed a bad flag: %v", bad)
	}
	if bad := c.checkArgs([]string{"gatewy"}); len(bad) != 1 {
		t.Errorf("checkArgs missed a bad subcommand: %v", bad)
	}
}

// TestEveryVariableHasADefaultOrIsGiven: a variable with an empty default is
// either a feature that is off by design or one the deployments must set.
func TestEveryVariableHasADefaultOrIsGiven(t *testing.T) {
	t.Parallel()
	c := mustCode(t)
	needed := map[string]bool{}
	for _, names := range needs {
		for _, n := range names {
			needed[n] = true
			if _, ok := c.env[n]; !ok {
				t.Errorf("needs lists %s, which no setting declares", n)
			}
		}
	}
	for _, name := range sortedKeys(c.env) {
		if c.env[name].empty() && !needed[name] && emptyByDesign[name] == "" {
			t.Errorf("%s has an empty default: add it to needs (and set it in docker-compose.yml and deploy/k8s) "+
				"or to emptyByDesign with the reason", name)
		}
	}
	for name := range emptyByDesign {
		if _, ok := c.env[name]; !ok {
			t.Errorf("emptyByDesign lists %s, which no setting declares", name)
		}
	}
}
