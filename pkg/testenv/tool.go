package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// MustTool finds an external tool the tests run (promtool, a Pushgateway,
// kubectl-validate) the way its fetch script does, without fetching: the
// path in the environment variable envVar, then name on the PATH, then
// cached (a path under ${ORDERPIPE_CACHE:-~/.cache/orderpipe}). Missing,
// the test is skipped — except in CI (CI set), where `make test` has run
// the fetch script first and a missing tool is a broken install step; a
// path in envVar that is not an executable always fails.
func MustTool(tb testing.TB, envVar, name, cached, fetch string) string {
	tb.Helper()
	if p := os.Getenv(envVar); p != "" {
		if !isExecutable(p) {
			tb.Fatalf("%s=%s is not an executable", envVar, p)
		}
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	cache := os.Getenv("ORDERPIPE_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "orderpipe")
	}
	if p := filepath.Join(cache, cached); isExecutable(p) {
		return p
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("no %s: `make test` fetches it with %s", name, fetch)
	}
	tb.Skipf("no %s; run %s (make test does)", name, fetch)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
