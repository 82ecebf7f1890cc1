package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestTiers: every name in the Makefile's E2E_TESTS (the tests `make test`
// skips and `make e2e` runs) is a serial test of this package, so a renamed
// or moved test cannot fall out of both tiers, nor run in parallel with the
// others of its tier (they share one built binary); E2E_KAFKA_TESTS (those
// `make test-kafka` runs too) is a part of it.
func TestTiers(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	list := func(variable string) []string {
		m := regexp.MustCompile(`(?m)^` + variable + ` :=((?:.*\\\n)*.*)$`).FindSubmatch(mk)
		if m == nil {
			t.Fatalf("no %s in the Makefile", variable)
		}
		names := strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))
		if len(names) == 0 {
			t.Fatalf("%s is empty", variable)
		}
		return names
	}
	names := list("E2E_TESTS")
	for _, k := range list("E2E_KAFKA_TESTS") {
		if !slices.Contains(names, k) {
			t.Errorf("E2E_KAFKA_TESTS names %s, which is not in E2E_TESTS", k)
		}
	}
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, name := range names {
		body := regexp.MustCompile(`(?ms)^func ` + regexp.QuoteMeta(name) + `\(t \*testing\.T\) \{\n(.*?)^\}`).FindStringSubmatch(src.String())
		switch {
		case body == nil:
			t.Errorf("E2E_TESTS names %s, which is not a test of the root package", name)
		case strings.Contains(body[1], "t.Parallel()"):
			t.Errorf("%s is in E2E_TESTS but calls t.Parallel()", name)
		}
	}
}
