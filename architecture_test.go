package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestArchitecture holds the code to the layout docs/architecture.md and
// docs/stores.md describe, each rule derived from the code itself rather
// than from a list of files allowed to break it:
//
//   - StorageOwners: the tables schemas/ creates are named in SQL by
//     pkg/order alone; a Redis key prefix is named by the one package that
//     builds it (pkg/stock's item layout, pkg/lock's locks), as is the item
//     hash tag; Lua lives with the keys it touches; an owner hands out
//     neither its Redis client nor its pool. Tests reach behind an owner
//     through its test helper (stocktest, ordertest) where it has one.
//   - ImportDirections: pkg/ imports, outside pkg/, only leaves (a package
//     that imports nothing of the module: schemas/, gateway/client); a
//     component (any other top-level directory) imports no other
//     component but leaves; nothing outside bench/ imports bench/.
//   - ProductionBuildHasNoTestFakes: the production build (no tags, what
//     make build and the Dockerfile build) links no fake and no test tooling.
//
// Every Go file of the module is read whatever its build tags. A program
// that links neither pkg/stock nor pkg/order (bench/floorpipe, the floor
// the pipeline is measured against) is not orderpipe: its keys and tables
// are its own.
func TestArchitecture(t *testing.T) {
	t.Parallel()
	mod := mustModule(t)
	t.Run("StorageOwners", func(t *testing.T) {
		t.Parallel()
		checkStorageOwners(t, mod)
	})
	t.Run("ImportDirections", func(t *testing.T) {
		t.Parallel()
		checkImportDirections(t, mod)
	})
	t.Run("ProductionBuildHasNoTestFakes", func(t *testing.T) {
		t.Parallel()
		checkProductionDeps(t)
	})
}

// goFile is one parsed Go file of the module.
type goFile struct {
	path string // module-relative, slash-separated
	dir  string // its package's directory
	test bool
	ast  *ast.File
}

// goPackage is one package as go list -tags dev sees it.
type goPackage struct {
	ImportPath, Name, Dir string
	Imports, Deps         []string
}

type module struct {
	files    []goFile
	packages map[string]goPackage // by module-relative directory ("." for the root)
	lua      []string             // .lua files, module-relative
}

var (
	moduleOnce sync.Once
	moduleVal  module
	moduleErr  error
)

func mustModule(t *testing.T) module {
	t.Helper()
	moduleOnce.Do(func() { moduleVal, moduleErr = readModule() })
	if moduleErr != nil {
		t.Fatal(moduleErr)
	}
	return moduleVal
}

func readModule() (module, error) {
	m := module{packages: map[string]goPackage{}}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != "." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		rel := filepath.ToSlash(p)
		switch {
		case strings.HasSuffix(rel, ".lua"):
			m.lua = append(m.lua, rel)
		case strings.HasSuffix(rel, ".go"):
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution|parser.ParseComments)
			if err != nil {
				return err
			}
			m.files = append(m.files, goFile{path: rel, dir: path.Dir(rel), test: strings.HasSuffix(rel, "_test.go"), ast: f})
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	for _, tags := range []string{"dev", "chaos"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-f",
			"{{.ImportPath}}|{{.Name}}|{{.Dir}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", "./...").Output()
		if err != nil {
			return m, err
		}
		wd, _ := os.Getwd()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(line, "|")
			dir, _ := filepath.Rel(wd, f[2])
			m.packages[filepath.ToSlash(dir)] = goPackage{ImportPath: f[0], Name: f[1], Dir: filepath.ToSlash(dir),
				Imports: strings.Fields(f[3]), Deps: strings.Fields(f[4])}
		}
	}
	return m, nil
}

// otherProgram reports whether dir is a program other than orderpipe: a
// main package (not the root) that links neither storage owner.
func (m module) otherProgram(dir string) bool {
	p, ok := m.packages[dir]
	return ok && dir != "." && p.Name == "main" &&
		!slices.Contains(p.Deps, "orderpipe/pkg/stock") && !slices.Contains(p.Deps, "orderpipe/pkg/order")
}

// testReachesBehind reports whether f is a test that may reach behind the
// storage owner o without its test helper: o has none (a package
// <o>/<x>test), or f's package applies the migrations (it imports
// schemas/ and pgx: the tests of the database lifecycle, which fill tables
// to see them emptied).
func (m module) testReachesBehind(f goFile, o string) bool {
	if !f.test {
		return false
	}
	hasHelper := false
	for dir := range m.packages {
		if strings.HasPrefix(dir, o+"/") && strings.HasSuffix(path.Base(dir), "test") {
			hasHelper = true
		}
	}
	if !hasHelper {
		return true
	}
	imps := m.packages[f.dir].Imports
	return slices.Contains(imps, "orderpipe/schemas") &&
		slices.ContainsFunc(imps, func(i string) bool { return strings.HasPrefix(i, "github.com/jackc/pgx/") })
}

// ownerOf is the package a directory's storage access counts for: an
// owner's internal packages and its test helper (a subpackage named
// <x>test) are the owner's.
func ownerOf(dir string) string {
	if i := strings.Index(dir, "/internal/"); i >= 0 {
		dir = dir[:i]
	} else if strings.HasSuffix(dir, "/internal") {
		dir = strings.TrimSuffix(dir, "/internal")
	}
	if base := path.Base(dir); strings.HasSuffix(base, "test") && base != "test" {
		dir = path.Dir(dir)
	}
	return dir
}

var (
	// sqlStatement is a literal that starts as an SQL statement does.
	sqlStatement = regexp.MustCompile(`(?is)^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|` +
		`CREATE\s+(TABLE|INDEX|DATABASE|SCHEMA|UNIQUE)\s|DROP\s+(TABLE|DATABASE|SCHEMA|INDEX)\s|ALTER\s+TABLE\s|TRUNCATE\s|WITH\s+\w+\s+AS\s*\()`)
	createTable = regexp.MustCompile(`(?i)CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)`)
	// keyPrefix is a literal that starts a Redis key after the store's
	// prefix: `prefix + "stock:" + tag`.
	keyPrefix = regexp.MustCompile(`^([a-z]+):$`)
	// hashTagFormat is the literal that builds an item's hash tag.
	hashTagFormat = regexp.MustCompile(`[{]a%d:i%d`)
	// itemHashTag is a literal naming an item's hash tag.
	itemHashTag = regexp.MustCompile(`\{a(\d+|%d|\*)?(:i|$)`)
	luaCall     = regexp.MustCompile(`redis\.p?call\(`)
)

// literals calls fn with every string literal of f.
func literals(f *ast.File, fn func(s string)) {
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				fn(s)
			}
		}
		return true
	})
}

// keyPrefixes finds the key prefixes f builds: a literal "<name>:" right
// after an operand named like a prefix (prefix, k.Prefix, s.prefix).
func keyPrefixes(f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		b, ok := n.(*ast.BinaryExpr)
		if !ok || b.Op != token.ADD {
			return true
		}
		lit, ok := b.Y.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, _ := strconv.Unquote(lit.Value)
		m := keyPrefix.FindStringSubmatch(s)
		if m == nil {
			return true
		}
		var name string
		switch x := b.X.(type) {
		case *ast.Ident:
			name = x.Name
		case *ast.SelectorExpr:
			name = x.Sel.Name
		}
		if strings.EqualFold(name, "prefix") {
			out = append(out, m[1])
		}
		return true
	})
	return out
}

func checkStorageOwners(t *testing.T, m module) {
	// The tables: what schemas/ creates.
	sqls, err := filepath.Glob("schemas/*.sql")
	if err != nil || len(sqls) == 0 {
		t.Fatalf("no migrations in schemas/ (%v)", err)
	}
	var tables []string
	for _, f := range sqls {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range createTable.FindAllStringSubmatch(string(b), -1) {
			tables = append(tables, strings.ToLower(c[1]))
		}
	}
	namesTable := regexp.MustCompile(`(?i)\b(` + strings.Join(tables, "|") + `)\b`)

	var files []goFile
	for _, f := range m.files {
		if !m.otherProgram(f.dir) {
			files = append(files, f)
		}
	}
	// Who builds each key prefix and the item hash tag: the owners.
	prefixOwners := map[string][]string{}
	tagOwners := map[string]bool{}
	for _, f := range files {
		if f.test {
			continue
		}
		for _, p := range keyPrefixes(f.ast) {
			if o := ownerOf(f.dir); !slices.Contains(prefixOwners[p], o) {
				prefixOwners[p] = append(prefixOwners[p], o)
			}
		}
		literals(f.ast, func(s string) {
			if hashTagFormat.MatchString(s) {
				tagOwners[ownerOf(f.dir)] = true
			}
		})
	}
	for _, want := range []string{"stock", "limit", "req", "resv", "lock", "fence"} {
		if len(prefixOwners[want]) == 0 {
			t.Fatalf("no package builds the key prefix %q (found %v): is the check reading the right files?", want, prefixOwners)
		}
	}
	if len(tagOwners) != 1 {
		t.Errorf("the item hash tag {a%%d:i%%d} is built by %d packages (%v); one owns it", len(tagOwners), tagOwners)
	}
	keyOwners := map[string]bool{}
	byOwner := map[string][]string{}
	for p, owners := range prefixOwners {
		if len(owners) > 1 {
			t.Errorf("the key prefix %q: is built by %v; one package owns each key", p, owners)
		}
		keyOwners[owners[0]] = true
		byOwner[owners[0]] = append(byOwner[owners[0]], p)
	}
	ownerKey := map[string]*regexp.Regexp{}
	for o, ps := range byOwner {
		ownerKey[o] = regexp.MustCompile(`(^|[:"*])(` + strings.Join(ps, "|") + `):(\{|$)`)
	}

	for _, f := range files {
		owner := ownerOf(f.dir)
		literals(f.ast, func(s string) {
			if sqlStatement.MatchString(s) && namesTable.MatchString(s) && owner != "pkg/order" && !m.testReachesBehind(f, "pkg/order") {
				t.Errorf("%s: SQL on the table %s outside pkg/order; call a typed method of pkg/order (or ordertest in a test) instead",
					f.path, strings.ToLower(namesTable.FindString(s)))
			}
			for o, re := range ownerKey {
				if o != owner && re.MatchString(s) && !m.testReachesBehind(f, o) {
					t.Errorf("%s: names a key of %s (%q); call a typed method of %s (or its test helper in a test) instead", f.path, o, s, o)
				}
			}
			if itemHashTag.MatchString(s) && !tagOwners[owner] {
				t.Errorf("%s: names an item's hash tag (%q) outside its owner", f.path, s)
			}
			if luaCall.MatchString(s) && !keyOwners[owner] {
				t.Errorf("%s: holds a Lua script but owns no keys; scripts live with the keys they touch", f.path)
			}
		})
	}
	for _, l := range m.lua {
		if dir := path.Dir(l); !keyOwners[ownerOf(dir)] && !m.otherProgram(dir) {
			t.Errorf("%s: a Lua script in a package that owns no keys; scripts live with the keys they touch", l)
		}
	}
	// The owners hand out neither their client nor their pool.
	owners := []string{"pkg/order"}
	for o := range keyOwners {
		owners = append(owners, o)
	}
	for _, f := range files {
		if f.test || !slices.Contains(owners, f.dir) {
			continue
		}
		for _, fn := range exportedReturning(f.ast, "redis", "pgx", "pgxpool", "pgconn", "layout") {
			t.Errorf("%s: %s hands out the storage itself; return a typed value", f.path, fn)
		}
	}
}

// exportedReturning lists the exported functions and methods of f whose
// results name one of the packages.
func exportedReturning(f *ast.File, pkgs ...string) []string {
	var out []string
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || !fn.Name.IsExported() || fn.Type.Results == nil {
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
	return out
}

func checkImportDirections(t *testing.T, m module) {
	const modPath = "orderpipe"
	byPath := map[string]goPackage{}
	for _, p := range m.packages {
		byPath[p.ImportPath] = p
	}
	leaf := func(imp string) bool {
		for _, i := range byPath[imp].Imports {
			if strings.HasPrefix(i, modPath+"/") {
				return false
			}
		}
		return true
	}
	top := func(dir string) string { return strings.Split(dir, "/")[0] }
	seen := 0
	for _, p := range m.packages {
		if p.Dir == "." {
			continue // the root wires everything
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, modPath+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, modPath+"/")
			seen++
			switch from, to := top(p.Dir), top(dep); {
			case from == to:
			case to == "bench":
				t.Errorf("%s imports %s: nothing outside bench/ imports the test tools", p.ImportPath, imp)
			case from == "bench":
			case from == "pkg" && !leaf(imp):
				t.Errorf("%s imports %s: pkg/ is the leaf layer and imports no component", p.ImportPath, imp)
			case from != "pkg" && to != "pkg" && !leaf(imp):
				t.Errorf("%s imports %s: components meet through pkg/, Kafka, Redis and Postgres, never each other", p.ImportPath, imp)
			}
		}
	}
	if seen < 50 {
		t.Errorf("only %d imports between the module's packages: is the check reading go list's answer?", seen)
	}
}

// testTooling reports whether a package may only be linked by tests and
// development builds: the fakes, and the module's test tooling — a test
// helper package (testenv, <x>test), the test tools under bench/, the
// invariant checker the tests and the chaos suite judge by, and the
// stand-ins of development builds.
func testTooling(importPath string) bool {
	for _, fake := range []string{"github.com/twmb/franz-go/pkg/kfake", "github.com/alicebob/miniredis/",
		"github.com/fergusstrange/embedded-postgres", "github.com/lib/pq", "github.com/yuin/gopher-lua"} {
		if importPath == strings.TrimSuffix(fake, "/") || strings.HasPrefix(importPath, fake) {
			return true
		}
	}
	rel, ok := strings.CutPrefix(importPath, "orderpipe/")
	if !ok {
		return false
	}
	base := path.Base(rel)
	return strings.HasPrefix(base, "test") || strings.HasSuffix(base, "test") || strings.HasPrefix(rel, "bench/") ||
		rel == "pkg/invariant" || rel == "pkg/standin"
}

func checkProductionDeps(t *testing.T) {
	deps := func(tags ...string) []string {
		args := append(append([]string{"list", "-deps"}, tags...), ".")
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return strings.Fields(string(out))
	}
	prod, dev := deps(), deps("-tags", "dev")
	for _, p := range prod {
		if testTooling(p) {
			t.Errorf("the production build links %s", p)
		}
	}
	// The dev build does link them, which shows the check sees them.
	for _, p := range []string{"github.com/twmb/franz-go/pkg/kfake", "orderpipe/pkg/standin"} {
		if !slices.Contains(dev, p) || !testTooling(p) {
			t.Errorf("the dev build lacks %s, or it is not test tooling: is the check looking at the right list?", p)
		}
	}
	// And the production builds are built without tags.
	for _, f := range []string{"Makefile", "deploy/Dockerfile"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if (strings.Contains(line, "-o bin/orderpipe ") || strings.Contains(line, "-o /out/orderpipe")) && strings.Contains(line, "-tags") {
				t.Errorf("%s builds the production binary with tags: %s", f, line)
			}
		}
	}
}
