//go:build chaos

package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSchedule: the nemesis's schedule is a pure function of the seed and
// the process names; the store faults and clock steps did not change the
// first stream (seed 1 keeps the faults that found the replay-while-producing loss); no
// target is hit twice at once by one stream; a real cluster's brokers are
// sometimes killed, kfake's never; clocks are stepped on gateways and
// workers only; a preheat cut pauses Redis, or Postgres only when the suite
// runs its own, and never while a store fault holds that target.
func TestSchedule(t *testing.T) {
	comps := []string{"worker", "worker-2", "closer", "gateway", "gateway-2"}
	hooks := []string{"webhook", "webhook-2"}
	load := 12 * time.Second
	a := nemesisSchedule(1, load, comps, []string{"kafka"}, hooks, true, true)
	if b := nemesisSchedule(1, load, comps, []string{"kafka"}, hooks, true, true); !slices.Equal(a, b) {
		t.Fatalf("seed 1 drew two schedules:\n%v\n%v", a, b)
	}
	var first []string
	for _, f := range processFaults(1, load, comps, []string{"kafka"}) {
		first = append(first, f.String())
	}
	want := []string{"+1.4s pause closer for 2.11s", "+1.7s poison topic", "+2.3s kill gateway for 550ms",
		"+4.2s pause kafka for 2.12s", "+4.8s kill worker for 1.99s", "+6.4s poison topic", "+7.8s pg-reset postgres for 400ms",
		"+7.9s pause gateway-2 for 2.05s", "+8.7s pause closer for 1.46s", "+8.8s kill gateway for 1.06s"}
	if !slices.Equal(first, want) {
		t.Errorf("seed 1's first stream changed:\n got %v\nwant %v", first, want)
	}
	for _, f := range want {
		if !slices.ContainsFunc(a, func(g fault) bool { return g.String() == f }) {
			t.Errorf("seed 1's schedule lacks %q", f)
		}
	}

	kinds := map[string]int{}
	preheatTargets := map[string]int{}
	brokerKills := 0
	for seed := uint64(1); seed <= 200; seed++ {
		for _, real := range []bool{false, true} {
			brokers, link := []string{"kafka"}, true
			if real {
				brokers, link = []string{"kafka-1", "kafka-2", "kafka-3"}, false
			}
			fs := nemesisSchedule(seed, load, comps, brokers, hooks, true, link)
			until := map[string]time.Duration{}
			for i, f := range fs {
				if i > 0 && f.At < fs[i-1].At {
					t.Fatalf("seed %d: not in time order: %v", seed, fs)
				}
				kinds[f.Kind]++
				if f.Kind == "kill" && strings.HasPrefix(f.Target, "kafka") {
					if !real {
						t.Fatalf("seed %d: the kfake broker killed: %s", seed, f)
					}
					brokerKills++
				}
				if f.Kind == "clock-step" && !strings.HasPrefix(f.Target, "gateway") && !strings.HasPrefix(f.Target, "worker") {
					t.Fatalf("seed %d: a clock step of %s, which reads no clock for a decision", seed, f)
				}
				if f.Kind == "preheat-cut" {
					preheatTargets[f.Target]++
					for _, g := range fs {
						if streamOf(g) == "stores" && g.Target == f.Target && g.At < f.At+f.For+preheatSlack && f.At < g.At+g.For+storeSettle(g) {
							t.Fatalf("seed %d: %s overlaps %s", seed, f, g)
						}
					}
				}
				if real && f.Target == "kafka-link" {
					t.Fatalf("seed %d: a broker link fault on the real cluster (not proxied): %s", seed, f)
				}
				// One stream's faults on a target never overlap (pg-latency
				// of the first and pg-restart of the second may).
				key := f.Target + "/" + streamOf(f)
				if f.At < until[key] {
					t.Fatalf("seed %d: %s starts before the previous fault on %s healed", seed, f, f.Target)
				}
				until[key] = f.At + f.For
			}
		}
	}
	for _, k := range []string{"kill", "pause", "pg-latency", "pg-reset", "poison", "redis-restart", "redis-failover",
		"redis-latency", "redis-reset", "redis-bandwidth", "pg-restart", "kafka-latency", "kafka-reset", "kafka-bandwidth", "clock-step",
		"fix-move", "preheat-cut", "flood-giveback", "webhook-reset", "webhook-hang", "webhook-500"} {
		if kinds[k] == 0 {
			t.Errorf("200 seeds never drew %s", k)
		}
	}
	if preheatTargets["redis"] == 0 || preheatTargets["postgres"] == 0 {
		t.Errorf("200 seeds drew preheat cuts of %v, want Redis and Postgres both", preheatTargets)
	}
	for seed := uint64(1); seed <= 200; seed++ {
		for _, f := range preheatFaults(seed, load, false, nil) {
			if f.Target != "redis" {
				t.Fatalf("seed %d: %s without the suite's own PostgreSQL (it cannot be paused)", seed, f)
			}
		}
	}
	t.Logf("preheat cuts over 200 seeds × 2 clusters: %v", preheatTargets)
	if brokerKills == 0 {
		t.Error("200 seeds never killed a broker of the real cluster")
	}
}

// streamOf names the stream a fault comes from.
func streamOf(f fault) string {
	switch {
	case f.Kind == "clock-step":
		return "clocks"
	case f.Kind == "fix-move":
		return "fixes"
	case f.Kind == "preheat-cut":
		return "preheats"
	case f.Kind == "flood-giveback":
		return "floods"
	case strings.HasPrefix(f.Kind, "webhook-"), strings.HasPrefix(f.Target, "webhook"):
		return "webhooks"
	case f.Kind == "pause" && (f.Target == "redis" || f.Target == "postgres"),
		strings.HasPrefix(f.Kind, "redis-"), strings.HasPrefix(f.Kind, "kafka-"), f.Kind == "pg-restart":
		return "stores"
	}
	return "processes"
}
