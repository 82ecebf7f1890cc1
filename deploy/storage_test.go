package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Storage has one owner (docs/stores.md, "Who owns storage"): every
// Redis key and script is pkg/stock's, every SQL statement pkg/order's.
// TestStorageHasOneOwner reads every Go file of the module, whatever its
// build tags, and finds where each kind of storage access is:
//
//   - redis: imports the go-redis client;
//   - pgx: imports pgx, pgxpool or pgconn;
//   - sql: holds a string literal that is an SQL statement;
//   - key: holds a string literal that names a key of pkg/stock's layout
//     (a "stock:", "limit:", "resv:"… prefix, or an item hash tag "{a…:i");
//   - helper: imports an owner's test helper (stocktest, ordertest) or its
//     internal package.
//
// Each kind is allowed in its owners' directories only: tests and test
// tools reach behind an owner through its test helper package.
func TestStorageHasOneOwner(t *testing.T) {
	t.Parallel()
	found := storageAccess(t)
	for file, kinds := range found {
		for _, kind := range kinds {
			if storageAllowed(kind, file) {
				continue
			}
			t.Errorf("%s: %s outside its owner (%s); call a typed method of the owner instead (docs/stores.md, Who owns storage)",
				file, kind, storageOwners[kind])
		}
	}
	// The owners hand out neither their client nor their pool.
	for _, owner := range []struct{ dir, typ string }{{"pkg/stock", "Store"}, {"pkg/order", "Store"}} {
		for _, m := range exportedMethodsReturning(t, owner.dir, owner.typ, "redis", "pgx", "pgxpool", "pgconn", "layout") {
			t.Errorf("%s.%s.%s hands out the storage itself; return a typed value", owner.dir, owner.typ, m)
		}
	}
}

// storageOwners are the directories (and files) where each kind belongs.
var storageOwners = map[string]string{
	// pkg/redisconn builds the client (pkg/target opens it and hands it to
	// stock.New and lock.New), pkg/lock owns its lock:/fence: keys
	// and scripts, pkg/telemetry instruments the client (spans, no keys),
	// pkg/rediskeys unlinks by a pattern its caller gives (test and bench
	// cleanups), pkg/testenv is the tests' connection factory and
	// administers the chaos suite's own servers (servers.go).
	// bench/floorpipe is the floor the pipeline is measured against: a
	// program of its own, written with the client libraries alone, with
	// keys (under its own prefix) and a table (floor_orders) orderpipe never
	// reads; it owns those.
	"redis": "pkg/stock pkg/redisconn pkg/lock pkg/telemetry pkg/rediskeys pkg/testenv pkg/target bench/floorpipe",
	// pkg/database connects and migrates; pkg/target opens the pool it
	// hands to order.NewStore; pkg/standin and pkg/testenv start and create
	// databases. A lock's fencing check (lock_fences) is pkg/order's.
	"pgx":    "pkg/order pkg/database pkg/target pkg/standin pkg/testenv bench/floorpipe",
	"sql":    "pkg/order pkg/database pkg/testenv bench/floorpipe",
	"key":    "pkg/stock bench/floorpipe",
	"helper": "pkg/stock pkg/order",
}

func storageAllowed(kind, file string) bool {
	for _, owner := range strings.Fields(storageOwners[kind]) {
		if file == owner || strings.HasPrefix(file, owner+"/") {
			return true
		}
	}
	// An owner's test helper is for tests and the test tools (the bench's
	// load and audit, the chaos suite).
	return kind == "helper" && (strings.HasSuffix(file, "_test.go") || strings.HasPrefix(file, "bench/"))
}

var (
	// sqlStatement is a literal that starts as an SQL statement does.
	sqlStatement = regexp.MustCompile(`(?is)^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|` +
		`CREATE\s+(TABLE|INDEX|DATABASE|SCHEMA|UNIQUE)\s|DROP\s+(TABLE|DATABASE|SCHEMA|INDEX)\s|ALTER\s+TABLE\s|TRUNCATE\s|WITH\s+\w+\s+AS\s*\()`)
	// layoutKey is a literal naming a key of pkg/stock's layout: one of
	// its prefixes before a hash tag (or at the literal's end), or an item
	// hash tag.
	layoutKey = regexp.MustCompile(`(^|[:"*])(stock|sale|resv|xfers|limit|req|ord|fate|xfer|xhold|lmk|bfence):(\{|$)|\{a(\d+|%d|\*)?(:i|$)`)
)

// storageAccess maps each Go file (module-relative, slash-separated) to the
// kinds of storage access it has.
func storageAccess(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		var kinds []string
		add := func(k string) {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			switch {
			case strings.HasPrefix(p, "github.com/redis/go-redis/"):
				add("redis")
			case strings.HasPrefix(p, "github.com/jackc/pgx/"):
				add("pgx")
			case p == "orderpipe/pkg/stock/stocktest" || p == "orderpipe/pkg/order/ordertest" ||
				strings.HasPrefix(p, "orderpipe/pkg/stock/internal/") || strings.HasPrefix(p, "orderpipe/pkg/order/internal/"):
				add("helper")
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if sqlStatement.MatchString(s) {
				add("sql")
			}
			if layoutKey.MatchString(s) {
				add("key")
			}
			return true
		})
		slices.Sort(kinds)
		if len(kinds) > 0 {
			out[rel] = kinds
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// exportedMethodsReturning lists the exported methods of typ in dir (its
// non-test files) whose results name one of the packages.
func exportedMethodsReturning(t *testing.T, dir, typ string, pkgs ...string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil || len(matches) == 0 {
		t.Fatalf("no Go files in %s (%v)", dir, err)
	}
	var out []string
	for _, path := range matches {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() || fn.Type.Results == nil || receiverName(fn) != typ {
				continue
			}
			ast.Inspect(fn.Type.Results, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && slices.Contains(pkgs, id.Name) {
						out = append(out, fn.Name.Name)
						return false
					}
				}
				return true
			})
		}
	}
	return out
}

func receiverName(fn *ast.FuncDecl) string {
	e := fn.Recv.List[0].Type
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
