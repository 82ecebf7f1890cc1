//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestChaos runs every scenario (CHAOS_SCENARIOS=a,b picks some) against
// one set of processes and fails if any invariant broke. Knobs:
// CHAOS_BIN (else the binary is built), CHAOS_SEED, CHAOS_LOAD (Go duration
// per scenario), CHAOS_OUT (log folder), CHAOS_KEEP=1, CHAOS_PG_BIN (the
// folder of the initdb and postgres the suite runs a PostgreSQL of its own
// with; default: the newest /usr/lib/postgresql/*/bin, else the PATH),
// CHAOS_REDIS_SERVER (the redis-server binary the suite runs its own
// primary and replica of; default: from the PATH), CHAOS_REDIS_REPL_LAG (a
// Go duration: latency on the replication link, so a failover loses the
// writes of that stretch);
// CHAOS_BUCKETS=n splits each item's stock over n Redis buckets (bucketed
// stock; the checker's rules are the same).
// CHAOS_KAFKA_NODES=3 runs on a real 3-broker Apache Kafka cluster the
// suite starts with CHAOS_KAFKA_SCRIPT (default deploy/kafka/kafka.sh),
// and adds the scenarios only a real cluster has (`make chaos-kafka`).
//
//	go test -tags chaos -run TestChaos -v -timeout 20m ./bench/chaos/
func TestChaos(t *testing.T) {
	cfg := chaosConfig(t)
	var only map[string]bool
	if v := os.Getenv("CHAOS_SCENARIOS"); v != "" {
		only = map[string]bool{}
		for _, n := range strings.Split(v, ",") {
			only[strings.TrimSpace(n)] = true
		}
	}

	ctx := context.Background()
	start := time.Now()
	s := mustStart(t, ctx, cfg)
	var lines []string
	for i, sc := range Scenarios() {
		if only != nil && !only[sc.Name] || sc.RealOnly && cfg.KafkaNodes == 0 {
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
	broker := brokerName(cfg)
	fmt.Printf("\nchaos summary (%s, %d cores, seed %d, %s load per scenario, %s in all; logs %s):\n",
		broker, runtime.NumCPU(), s.cfg.Seed, s.cfg.LoadFor, time.Since(start).Round(time.Second), s.Dir)
	for _, l := range lines {
		fmt.Println(l)
	}
}

// chaosConfig is the run's Config from the environment (see TestChaos);
// without CHAOS_BIN it builds the binary.
func chaosConfig(t *testing.T) Config {
	t.Helper()
	cfg := Config{Bin: os.Getenv("CHAOS_BIN"), RedisServer: os.Getenv("CHAOS_REDIS_SERVER"),
		OutDir: os.Getenv("CHAOS_OUT"), Keep: os.Getenv("CHAOS_KEEP") != "", Log: os.Stdout}
	fromEnv(t, "CHAOS_SEED", &cfg.Seed, func(v string) (uint64, error) { return strconv.ParseUint(v, 10, 64) })
	fromEnv(t, "CHAOS_REDIS_REPL_LAG", &cfg.RedisReplLag, time.ParseDuration)
	fromEnv(t, "CHAOS_LOAD", &cfg.LoadFor, time.ParseDuration)
	fromEnv(t, "CHAOS_BUCKETS", &cfg.Buckets, func(v string) (int, error) {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= 64 {
			return n, nil
		}
		return 0, fmt.Errorf("want 1-64, got %q", v)
	})
	if fromEnv(t, "CHAOS_KAFKA_NODES", &cfg.KafkaNodes, strconv.Atoi) {
		cfg.KafkaScript = os.Getenv("CHAOS_KAFKA_SCRIPT")
		if cfg.KafkaScript == "" {
			// go test runs in the package's folder.
			script, err := filepath.Abs("../../deploy/kafka/kafka.sh")
			if err != nil {
				t.Fatal(err)
			}
			cfg.KafkaScript = script
		}
	}
	if cfg.Bin == "" {
		cfg.Bin = filepath.Join(t.TempDir(), "orderpipe")
		// -tags dev: the suite runs `orderpipe kafka`, which only
		// development builds have (make build-dev).
		build := exec.Command("go", "build", "-tags", "dev", "-o", cfg.Bin, "orderpipe")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building orderpipe: %v\n%s", err, out)
		}
	}
	return cfg
}

// mustStart starts the suite (closed at cleanup).
func mustStart(t *testing.T, ctx context.Context, cfg Config) *Suite {
	t.Helper()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// brokerName names the run's broker in a summary.
func brokerName(cfg Config) string {
	if cfg.KafkaNodes > 0 {
		return fmt.Sprintf("real Kafka, %d brokers", cfg.KafkaNodes)
	}
	return "kfake broker"
}

// fromEnv sets *dst to the variable name parsed, and says whether it was
// set; a value parse refuses fails t.
func fromEnv[T any](t *testing.T, name string, dst *T, parse func(string) (T, error)) bool {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return false
	}
	x, err := parse(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	*dst = x
	return true
}

// TestNemesis runs the storefront load with a seeded random nemesis on two
// gateways and two workers (plus the broker(s) and the closer), once per
// seed, each on a sale of its own, and fails if the history checker finds
// a violation. Knobs besides TestChaos's: CHAOS_SEED runs that one seed
// (repeating a failure), else CHAOS_NEMESIS_SEEDS (separated by commas or
// spaces; default 1,2,3); CHAOS_NEMESIS_LOAD (Go duration of each seed's load,
// default 12s); CHAOS_REDIS_WAIT_REPLICAS (the gateways' REDIS_WAIT_REPLICAS,
// default 1; 0 shows what a failover costs without it); CHAOS_SOAK (a Go duration: seeds CHAOS_SEED, +1, +2, ...
// until it has passed — `make soak`).
//
//	CHAOS_SEED=7 go test -tags chaos -run TestNemesis -v -timeout 20m ./bench/chaos/
func TestNemesis(t *testing.T) {
	cfg := chaosConfig(t)
	cfg.Gateways, cfg.Workers = 2, 2
	// Above some client timeouts (300 ms, 700 ms, 1.5 s) and below others (5 s).
	cfg.ProduceTimeout = 2 * time.Second
	cfg.Clients, cfg.Think, cfg.Users, cfg.Stock = 16, 40*time.Millisecond, 3000, 20000
	if cfg.Buckets > 1 {
		cfg.Stock = 1200 // bucketed: the items sell out under the faults, so buckets empty and the mover works
	}
	cfg.DrainWithin = 90 * time.Second
	// The gateways wait for the replica as production must; 0 shows what
	// a failover costs without it.
	cfg.RedisWaitReplicas = 1
	fromEnv(t, "CHAOS_REDIS_WAIT_REPLICAS", &cfg.RedisWaitReplicas, func(v string) (int, error) {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 && n <= 1 {
			return n, nil
		}
		return 0, fmt.Errorf("want 0 or 1 (the suite runs one replica), got %q", v)
	})
	nc := NemesisConfig{LoadFor: 12 * time.Second,
		Timeouts: []time.Duration{300 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second}}
	fromEnv(t, "CHAOS_NEMESIS_LOAD", &nc.LoadFor, time.ParseDuration)
	var seeds []uint64
	var soak time.Duration
	fromEnv(t, "CHAOS_SOAK", &soak, time.ParseDuration)
	switch v := os.Getenv("CHAOS_NEMESIS_SEEDS"); {
	case os.Getenv("CHAOS_SEED") != "":
		seeds = []uint64{cfg.Seed}
	case v != "":
		for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
			seed, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatalf("CHAOS_NEMESIS_SEEDS: %v", err)
			}
			seeds = append(seeds, seed)
		}
		if len(seeds) == 0 {
			t.Fatalf("CHAOS_NEMESIS_SEEDS: no seed in %q", v)
		}
	default:
		seeds = []uint64{1, 2, 3}
	}

	ctx := context.Background()
	start := time.Now()
	s := mustStart(t, ctx, cfg)
	var lines []string
	var ops, accepted, violations, faults int
	var lin linResult // every seed's linearizability check, added up
	kinds := map[string]int{}
	next := func(i int) (uint64, bool) {
		if soak > 0 {
			return seeds[0] + uint64(i), i == 0 || time.Since(start) < soak
		}
		if i < len(seeds) {
			return seeds[i], true
		}
		return 0, false
	}
	for i := 0; ; i++ {
		seed, ok := next(i)
		if !ok {
			break
		}
		nc.Seed = seed
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			res := s.Nemesis(ctx, nc, int64(100+i))
			lines = append(lines, res.Line())
			fmt.Println(res.Report())
			faults += len(res.Schedule)
			for _, f := range res.Schedule {
				kinds[f.Kind]++
			}
			if c := res.Check; c != nil {
				lin.Histories += c.lin.Histories
				lin.Operations += c.lin.Operations
				lin.Illegal = append(lin.Illegal, c.lin.Illegal...)
				lin.Unknown = append(lin.Unknown, c.lin.Unknown...)
				ops += c.calls
				accepted += c.accepted
				violations += len(c.violations)
			}
			if !res.OK() {
				t.Errorf("nemesis seed %d broke the rules (repeat: CHAOS_SEED=%d); see above", seed, seed)
			}
		})
	}
	broker := brokerName(cfg)
	fmt.Printf("\nnemesis summary (%s, 2 gateways, 2 workers, PRODUCE_TIMEOUT %s, client timeouts %v, %d cores, %s load per seed, %s in all; logs %s):\n",
		broker, cfg.ProduceTimeout, nc.Timeouts, runtime.NumCPU(), nc.LoadFor, time.Since(start).Round(time.Second), s.Dir)
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Printf("nemesis total: %d seeds, %d faults, %d calls, %d requests accepted, %d violations\n", len(lines), faults, ops, accepted, violations)
	byKind := make([]string, 0, len(kinds))
	for k, n := range kinds {
		byKind = append(byKind, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(byKind)
	fmt.Printf("nemesis faults by kind: %s\n", strings.Join(byKind, ", "))
	fmt.Printf("nemesis %s\n", lin)
	fmt.Printf("nemesis %s\n", givebackSummary())
}
