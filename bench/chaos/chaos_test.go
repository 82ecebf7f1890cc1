//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestChaos runs every scenario (CHAOS_SCENARIOS=a,b picks some) against
// one set of processes and fails if any invariant broke. Knobs:
// CHAOS_BIN (else the binary is built), CHAOS_SEED, CHAOS_LOAD (Go duration
// per scenario), CHAOS_OUT (log folder), CHAOS_KEEP=1, TEST_DATABASE_URL
// (the server a database is created on), TEST_REDIS_ADDR.
//
//	go test -tags chaos -run TestChaos -v -timeout 20m ./bench/chaos/
func TestChaos(t *testing.T) {
	cfg := Config{Bin: os.Getenv("CHAOS_BIN"), ServerURL: os.Getenv("TEST_DATABASE_URL"), RedisAddr: os.Getenv("TEST_REDIS_ADDR"),
		OutDir: os.Getenv("CHAOS_OUT"), Keep: os.Getenv("CHAOS_KEEP") != "", Log: os.Stdout}
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED: %v", err)
		}
		cfg.Seed = seed
	}
	if v := os.Getenv("CHAOS_LOAD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CHAOS_LOAD: %v", err)
		}
		cfg.LoadFor = d
	}
	if cfg.Bin == "" {
		cfg.Bin = filepath.Join(t.TempDir(), "orderpipe")
		build := exec.Command("go", "build", "-o", cfg.Bin, "orderpipe")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building orderpipe: %v\n%s", err, out)
		}
	}
	var only map[string]bool
	if v := os.Getenv("CHAOS_SCENARIOS"); v != "" {
		only = map[string]bool{}
		for _, n := range strings.Split(v, ",") {
			only[strings.TrimSpace(n)] = true
		}
	}

	ctx := context.Background()
	start := time.Now()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var lines []string
	for i, sc := range Scenarios() {
		if only != nil && !only[sc.Name] {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			fmt.Printf("chaos: scenario %s\n", sc.Name)
			res := s.Run(ctx, sc, int64(i+1))
			lines = append(lines, res.Line())
			fmt.Println(res.Line())
			fmt.Println(res.Detail())
			for _, p := range res.Problems {
				t.Error(p)
			}
		})
	}
	fmt.Printf("\nchaos summary (%d cores, seed %d, %s load per scenario, %s in all; logs %s):\n",
		runtime.NumCPU(), s.cfg.Seed, s.cfg.LoadFor, time.Since(start).Round(time.Second), s.Dir)
	for _, l := range lines {
		fmt.Println(l)
	}
}
