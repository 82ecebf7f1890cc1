package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The nemesis: during a storefront load it injects faults at random
// instants, possibly overlapping — components SIGKILLed and restarted, any
// process (the brokers too) paused with SIGSTOP and continued, Postgres
// slowed or reset through Toxiproxy, poison messages, a preheat cut
// part-way (fault_preheat.go) — then heals, drains
// and hands the history to the checker. The schedule is a pure function of
// the seed and the process names, printed before the run, so a failing run
// is repeated with CHAOS_SEED.

// fault is one entry of the schedule.
type fault struct {
	At     time.Duration // into the load
	For    time.Duration // down, paused or toxic for
	Kind   string        // kill, pause, pg-latency, pg-reset, poison, redis-*, clock-step, fix-move, preheat-cut, flood-giveback
	Target string        // a process name, "redis" (the primary), "postgres" or "topic"
	Step   time.Duration // clock-step: added to the target's wall clock
}

func (f fault) String() string {
	switch f.Kind {
	case "poison":
		return fmt.Sprintf("+%.1fs poison %s", f.At.Seconds(), f.Target)
	case "clock-step":
		return fmt.Sprintf("+%.1fs clock-step %s by %+v for %s", f.At.Seconds(), f.Target, f.Step, f.For.Round(10*time.Millisecond))
	}
	return fmt.Sprintf("+%.1fs %s %s for %s", f.At.Seconds(), f.Kind, f.Target, f.For.Round(10*time.Millisecond))
}

// nemesisSchedule draws the faults of a load of loadFor from seed: the
// process and link faults (processFaults), the store faults (storeFaults),
// the clock steps (clockFaults), the fixes during moves (fixMoveFaults,
// fault_fixmove.go), the preheat cuts (preheatFaults), the flood with
// units given back (givebackFaults, fault_giveback.go) and the webhook
// deliverers' and receiver's faults (webhookFaults, webhooks.go), each from a
// random stream of its own, so adding one left the earlier streams — the
// seeds' meaning before it — unchanged.
func nemesisSchedule(seed uint64, loadFor time.Duration, comps, brokers, deliverers []string, withPG, kafkaLink bool) []fault {
	stores := storeFaults(seed, loadFor, withPG, kafkaLink)
	out := append(processFaults(seed, loadFor, comps, brokers), stores...)
	out = append(out, clockFaults(seed, loadFor, comps)...)
	out = append(out, fixMoveFaults(seed, loadFor)...)
	out = append(out, preheatFaults(seed, loadFor, withPG, stores)...)
	out = append(out, givebackFaults(seed, loadFor)...)
	out = append(out, webhookFaults(seed, loadFor, deliverers)...)
	slices.SortStableFunc(out, func(a, b fault) int { return cmp.Compare(a.At, b.At) })
	return out
}

// schedule draws faults from rng at exponential gaps of mean gap between
// 10% and 80% of the load; pick draws one (For set, At not); a target
// already in a fault is not hit again until that one healed, plus settle.
func schedule(rng *rand.Rand, loadFor, gap time.Duration, pick func() fault, settle func(fault) time.Duration) []fault {
	busy := map[string]time.Duration{}
	var out []fault
	t := loadFor / 10
	for {
		t += time.Duration(rng.ExpFloat64() * float64(gap))
		if t > loadFor*8/10 {
			return out
		}
		f := pick()
		if busy[f.Target] > t {
			continue
		}
		f.At = t
		busy[f.Target] = t + f.For + settle(f)
		out = append(out, f)
	}
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// processFaults: about one every 1.2 s, from the menu with these weights
// (a killed process needs ~2 s to be ready again):
//
//	3 pause a broker 1–5 s (longer than PRODUCE_TIMEOUT, sometimes); on a
//	  real cluster one in three of these SIGKILLs the broker instead and
//	  restarts it after that time
//	3 SIGKILL a gateway, worker or closer, restart after 0.2–2 s
//	3 pause a gateway, worker or closer 0.3–3.3 s
//	1 Postgres latency 300±100 ms for 1–3 s (workers and closer)
//	1 Postgres connections reset for 0.3–1.5 s
//	1 three poison messages
func processFaults(seed uint64, loadFor time.Duration, comps, brokers []string) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973))
	return schedule(rng, loadFor, 1200*time.Millisecond, func() fault {
		switch r := rng.IntN(12); {
		case r < 3:
			f := fault{Kind: "pause", Target: brokers[rng.IntN(len(brokers))], For: between(rng, time.Second, 5*time.Second)}
			if len(brokers) > 1 && rng.IntN(3) == 0 {
				// A real cluster: one broker in three is SIGKILLed instead
				// and restarted after that time (log recovery, catching up).
				f.Kind = "kill"
			}
			return f
		case r < 6:
			return fault{Kind: "kill", Target: comps[rng.IntN(len(comps))], For: between(rng, 200*time.Millisecond, 2*time.Second)}
		case r < 9:
			return fault{Kind: "pause", Target: comps[rng.IntN(len(comps))], For: between(rng, 300*time.Millisecond, 3300*time.Millisecond)}
		case r < 10:
			return fault{Kind: "pg-latency", Target: "postgres", For: between(rng, time.Second, 3*time.Second)}
		case r < 11:
			return fault{Kind: "pg-reset", Target: "postgres", For: between(rng, 300*time.Millisecond, 1500*time.Millisecond)}
		}
		return fault{Kind: "poison", Target: "topic"}
	}, func(f fault) time.Duration {
		switch {
		case f.Kind == "kill" && strings.HasPrefix(f.Target, "kafka"):
			return 15 * time.Second // recovers its log and catches up
		case f.Kind == "kill":
			return 2 * time.Second
		}
		return 0
	})
}

// storeFaults: about one every 2.5 s, on the suite's Redis (one fault at a
// time), on its PostgreSQL when it runs its own (one at a time), and on the
// link to the kfake broker (one at a time), from the menu with these
// weights:
//
//	2 redis-restart: SIGKILL the Redis primary, start it again after
//	  0.3–1.5 s from its append-only file (nothing acknowledged lost)
//	2 redis-failover: cut the replication link for half of For, SIGKILL
//	  the primary, promote the replica after For (0.3–1.5 s) and move the
//	  proxy to it, the old primary back as its replica, then the repair
//	2 pause the Redis primary 0.3–2.5 s
//	1 Redis latency 150±50 ms for 1–3 s (every process)
//	1 Redis connections reset for 0.3–1.5 s
//	1 Redis bandwidth 32 KB/s each way for 1–3 s
//	2 pg-restart: SIGKILL the postmaster and every backend, start again
//	  after 0.3–2 s (crash recovery)
//	1 pause PostgreSQL (every backend) 0.5–3 s
//	1 broker link latency 200±100 ms for 1–3 s (kfake only: its clients
//	  reach it through a proxy it advertises)
//	1 broker link connections reset for 0.3–1.5 s
//	1 broker link bandwidth 32 KB/s each way for 1–3 s
//
// The repair after a failover (repairRedis) waits for the worker to catch
// up, then runs `orderpipe reconciler --once --fix`; Redis stays busy 5 s
// more for it (and after a restart, for its replica's resync).
func storeFaults(seed uint64, loadFor time.Duration, withPG, kafkaLink bool) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x73746f726573))
	var extra []string
	if withPG {
		extra = append(extra, "pg-restart", "pg-restart", "pause-postgres")
	}
	if kafkaLink {
		extra = append(extra, "kafka-latency", "kafka-reset", "kafka-bandwidth")
	}
	return schedule(rng, loadFor, 2500*time.Millisecond, func() fault {
		r := rng.IntN(9 + len(extra))
		if r >= 9 {
			switch kind := extra[r-9]; kind {
			case "pg-restart":
				return fault{Kind: kind, Target: "postgres", For: between(rng, 300*time.Millisecond, 2*time.Second)}
			case "pause-postgres":
				return fault{Kind: "pause", Target: "postgres", For: between(rng, 500*time.Millisecond, 3*time.Second)}
			case "kafka-reset":
				return fault{Kind: kind, Target: "kafka-link", For: between(rng, 300*time.Millisecond, 1500*time.Millisecond)}
			default:
				return fault{Kind: kind, Target: "kafka-link", For: between(rng, time.Second, 3*time.Second)}
			}
		}
		switch {
		case r < 2:
			return fault{Kind: "redis-restart", Target: "redis", For: between(rng, 300*time.Millisecond, 1500*time.Millisecond)}
		case r < 4:
			return fault{Kind: "redis-failover", Target: "redis", For: between(rng, 300*time.Millisecond, 1500*time.Millisecond)}
		case r < 6:
			return fault{Kind: "pause", Target: "redis", For: between(rng, 300*time.Millisecond, 2500*time.Millisecond)}
		case r < 7:
			return fault{Kind: "redis-latency", Target: "redis", For: between(rng, time.Second, 3*time.Second)}
		case r < 8:
			return fault{Kind: "redis-reset", Target: "redis", For: between(rng, 300*time.Millisecond, 1500*time.Millisecond)}
		}
		return fault{Kind: "redis-bandwidth", Target: "redis", For: between(rng, time.Second, 3*time.Second)}
	}, storeSettle)
}

// storeSettle is how long a store fault keeps its target busy after its
// time: storeFaults hits the target again no sooner, and a preheat fault
// keeps clear of it.
func storeSettle(f fault) time.Duration {
	switch f.Kind {
	case "redis-restart", "redis-failover":
		return 5 * time.Second
	case "pg-restart":
		return 2 * time.Second
	}
	return 0
}

// clockSteps are the clock-step menu: an NTP step of a second or two, a
// VM resumed a minute and a half late, a clock off by ten minutes, a
// time zone mistaken for UTC. The chaos sale runs from a minute before
// the load to an hour after, so a gateway stepped 90 s back or more sees
// the sale not started yet, and one 3 h ahead sees it over.
var clockSteps = []time.Duration{-3 * time.Hour, -10 * time.Minute, -90 * time.Second, -2 * time.Second,
	2 * time.Second, 90 * time.Second, 10 * time.Minute, 3 * time.Hour}

// clockFaults: about one every 3 s, a step of the wall clock of a gateway
// or a worker (the processes that stamp or compare absolute times: the
// closer and the sweeps go by the database's clock) by one of clockSteps,
// held 2–8 s, then stepped back. The step survives a restart of the
// process meanwhile (it is the machine's clock).
func clockFaults(seed uint64, loadFor time.Duration, comps []string) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x636c6f636b))
	var targets []string
	for _, c := range comps {
		if strings.HasPrefix(c, "gateway") || strings.HasPrefix(c, "worker") {
			targets = append(targets, c)
		}
	}
	if len(targets) == 0 {
		return nil
	}
	return schedule(rng, loadFor, 3*time.Second, func() fault {
		return fault{Kind: "clock-step", Target: targets[rng.IntN(len(targets))], Step: clockSteps[rng.IntN(len(clockSteps))],
			For: between(rng, 2*time.Second, 8*time.Second)}
	}, func(fault) time.Duration { return 0 })
}

// NemesisConfig is one nemesis run.
type NemesisConfig struct {
	Seed    uint64
	LoadFor time.Duration
	// Timeouts are the clients' timeouts (some below PRODUCE_TIMEOUT).
	Timeouts []time.Duration
}

// NemesisResult is one nemesis run's outcome.
type NemesisResult struct {
	Seed     uint64
	Act      int64
	Schedule []fault
	Applied  []string // what each fault did, as it happened
	Check    *checkResult
	Drained  time.Duration
	History  string // the JSON lines file
	Problems []string
}

// OK reports whether the run broke nothing.
func (r *NemesisResult) OK() bool {
	return len(r.Problems) == 0 && (r.Check == nil || len(r.Check.violations) == 0)
}

// Line is the run's one-line summary.
func (r *NemesisResult) Line() string {
	c := r.Check
	if c == nil {
		c = &checkResult{}
	}
	result := "PASS"
	if !r.OK() {
		result = "FAIL"
	}
	return fmt.Sprintf("nemesis seed=%-6d faults=%-2d requests=%-5d calls=%-5d accepted=%-5d timeouts=%-4d orders=%-5d histories=%-5d ops=%-5d linearizable=%s violations=%d result=%s",
		r.Seed, len(r.Schedule), c.requests, c.calls, c.accepted, c.timeouts, c.orders, c.lin.Histories, c.lin.Operations,
		strings.ReplaceAll(c.lin.Verdict(), " ", "-"), len(c.violations)+len(r.Problems), result)
}

// Report is the run in full: the schedule, what the faults did, the
// checker's findings with the ops of each offending requestId.
func (r *NemesisResult) Report() string {
	var b strings.Builder
	fmt.Fprintln(&b, r.Line())
	fmt.Fprintf(&b, "  schedule (seed %d):\n", r.Seed)
	for _, f := range r.Schedule {
		fmt.Fprintf(&b, "    %s\n", f)
	}
	fmt.Fprintf(&b, "  applied: %s\n", strings.Join(r.Applied, "; "))
	if c := r.Check; c != nil {
		fmt.Fprintf(&b, "  answers to POST /v1/orders %v; replays answered 2xx %d; given up %d; pays %v; cancels %v\n",
			c.answers, c.replays, c.gaveUp, c.pays, c.cancels)
		fmt.Fprintf(&b, "  %s\n", c.lin)
		fmt.Fprintf(&b, "  drained in %s, reconciler --once exit %d; history %s\n", r.Drained.Round(100*time.Millisecond), c.reconcileExit, r.History)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  PROBLEM %s\n", p)
	}
	if c := r.Check; c != nil && len(c.violations) > 0 {
		fmt.Fprintf(&b, "  VIOLATIONS (repeat with CHAOS_SEED=%d):\n", r.Seed)
		shown := map[string]bool{}
		for i, v := range c.violations {
			if i >= 12 {
				fmt.Fprintf(&b, "    … %d more\n", len(c.violations)-i)
				break
			}
			fmt.Fprintf(&b, "    %s\n", v.msg)
			if v.requestID != "" && !shown[v.requestID] && len(shown) < 6 {
				shown[v.requestID] = true
				fmt.Fprintf(&b, "      history of %s:\n%s", v.requestID, requestOps(c.t0, c.ops[v.requestID]))
			}
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// Nemesis runs a storefront load on a fresh sale act with the seed's
// faults, heals, drains and checks the history.
func (s *Suite) Nemesis(ctx context.Context, nc NemesisConfig, act int64) *NemesisResult {
	res := &NemesisResult{Seed: nc.Seed, Act: act}
	fail := func(format string, args ...any) { res.Problems = append(res.Problems, fmt.Sprintf(format, args...)) }
	items := []int64{1, 2}
	comps, brokers, deliverers := s.nemesisTargets()
	res.Schedule = nemesisSchedule(nc.Seed, nc.LoadFor, comps, brokers, deliverers, s.pg != nil, s.kafkaLink)
	s.schedule = res.Schedule
	s.logf("nemesis seed %d on sale %d, %s of load, %d faults:", nc.Seed, act, nc.LoadFor, len(res.Schedule))
	for _, f := range res.Schedule {
		s.logf("  %s", f)
	}
	if err := s.createSale(ctx, act, items); err != nil {
		fail("creating the sale: %v", err)
		return res
	}
	hist := s.loadWithFaults(ctx, nc, act, items, res)
	res.Problems = append(res.Problems, takePreheatFindings()...)

	for _, p := range s.heal(ctx) {
		fail("%s", p)
	}
	res.History = filepath.Join(s.Dir, fmt.Sprintf("history-seed%d-sale%d.jsonl", nc.Seed, act))
	if err := hist.write(res.History); err != nil {
		fail("writing the history: %v", err)
	}
	ops := hist.snapshot()
	drainStart := time.Now()
	if err := s.settle(ctx, act, items, acceptedRequests(ops)); err != nil {
		s.logf("nemesis seed %d: %v (the checker says what is missing); %s", nc.Seed, err,
			groupState(ctx, s.brokers, kafkaTopic, kafkaGroup))
	}
	res.Drained = time.Since(drainStart)
	if s.redisLost.Swap(false) {
		// Redis lost data during the load: the runbook's repair once more,
		// now that nothing is in flight (the one during the load raced it).
		desc, err := s.repairRedis(ctx)
		if err != nil {
			desc += fmt.Sprintf(" (%v)", err)
		}
		res.Applied = append(res.Applied, "after the drain: "+desc)
	}
	check, err := s.checkHistory(ctx, act, items, hist.t0, ops)
	if err != nil {
		fail("checking: %v", err)
		return res
	}
	res.Check = check
	s.logWebhooks(nc.Seed)
	// Beside the history; written only for a history that fails.
	check.checkLinearizable(ops, filepath.Join(s.Dir, fmt.Sprintf("linearizability-seed%d-sale%d.html", nc.Seed, act)))
	if check.reconcileExit != 0 {
		// The next run's reconciler check is about that run only.
		if code, out := s.reconcile(ctx, "--fix"); code != 0 {
			fail("reconciler --fix after the run: exit %d:\n%s", code, out)
		}
	}
	return res
}

// nemesisTargets names the processes the schedule may fault, by kind:
// pipeline components, Kafka brokers and webhook deliverers (the stores
// have faults of their own).
func (s *Suite) nemesisTargets() (comps, brokers, deliverers []string) {
	for _, p := range s.procs {
		switch {
		case p.store:
		case strings.HasPrefix(p.name, "kafka"):
			brokers = append(brokers, p.name)
		case strings.HasPrefix(p.name, "webhook"):
			deliverers = append(deliverers, p.name)
		default:
			comps = append(comps, p.name)
		}
	}
	return comps, brokers, deliverers
}

// loadWithFaults runs the storefront for nc.LoadFor while each fault of
// res.Schedule is inflicted at its time, and returns what the clients were
// told once both are over; res.Applied describes the faults, sorted.
func (s *Suite) loadWithFaults(ctx context.Context, nc NemesisConfig, act int64, items []int64, res *NemesisResult) *history {
	stop := make(chan struct{})
	sc := storefrontConfig{URLs: s.httpURLs, ActivityID: act, Items: items, Users: s.cfg.Users, Clients: s.cfg.Clients,
		Think: s.cfg.Think, Stop: stop, RetryFor: 10 * time.Second, Seed: nc.Seed, Timeouts: nc.Timeouts,
		PayShare: 0.3, CancelShare: 0.1, PollShare: 0.2, ReplayShare: 0.15, GiveUpShare: 0.08, LaterShare: 0.12}
	s.loadStart = time.Now()
	hist := newHistory(s.loadStart)
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		runStorefront(ctx, sc, hist)
	}()

	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, f := range res.Schedule {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(s.loadStart.Add(f.At)))
			desc, err := s.inflict(ctx, f, act)
			if err != nil {
				desc += fmt.Sprintf(" (%v)", err)
			}
			mu.Lock()
			res.Applied = append(res.Applied, desc)
			mu.Unlock()
		}()
	}
	time.Sleep(nc.LoadFor)
	close(stop)
	wg.Wait()
	<-loaded
	slices.Sort(res.Applied)
	return hist
}

// logWebhooks logs what the webhook receiver holds, every run's so far.
func (s *Suite) logWebhooks(seed uint64) {
	got := s.hooks.receipts()
	ids := map[string]bool{}
	for _, g := range got {
		ids[g.ID] = true
	}
	s.logf("nemesis seed %d: the webhook receiver holds %d webhooks, %d events (every run's so far)", seed, len(got), len(ids))
}

// inflict applies one fault and heals it after its time; it describes what
// happened when.
func (s *Suite) inflict(ctx context.Context, f fault, act int64) (string, error) {
	at := s.since()
	switch f.Kind {
	case "kill":
		p := s.proc(f.Target)
		if err := p.kill(); err != nil {
			return "kill " + f.Target + " at " + at, err
		}
		time.Sleep(f.For)
		restart := time.Now()
		if err := p.start(); err != nil {
			return "kill " + f.Target + " at " + at, err
		}
		err := p.waitReady(ctx, 60*time.Second)
		return fmt.Sprintf("SIGKILL %s at %s, restarted after %s, ready in %s", f.Target, at, f.For.Round(10*time.Millisecond),
			time.Since(restart).Round(10*time.Millisecond)), err
	case "pause":
		p := s.pauseTarget(f.Target)
		if err := p.pause(); err != nil {
			return "SIGSTOP " + p.name + " at " + at, err
		}
		time.Sleep(f.For)
		return fmt.Sprintf("SIGSTOP %s at %s, SIGCONT at %s", p.name, at, s.since()), p.resume()
	case "pg-latency", "redis-latency", "kafka-latency":
		link, ms, jitter := linkOf(f.Kind), 300, 100
		switch link {
		case "redis":
			ms, jitter = 150, 50
		case "kafka":
			ms, jitter = 200, 100
		}
		if err := s.toxi.latency(link, ms, jitter); err != nil {
			return link + " latency at " + at, err
		}
		time.Sleep(f.For)
		return fmt.Sprintf("%s latency %d±%dms at %s, removed at %s", link, ms, jitter, at, s.since()), s.toxi.remove(link, "latency")
	case "pg-reset", "redis-reset", "kafka-reset":
		link := linkOf(f.Kind)
		if err := s.toxi.resetPeer(link, 1); err != nil {
			return link + " reset at " + at, err
		}
		time.Sleep(f.For)
		return fmt.Sprintf("%s reset_peer at %s, removed at %s", link, at, s.since()), s.toxi.remove(link, "reset")
	case "redis-bandwidth", "kafka-bandwidth":
		link := linkOf(f.Kind)
		if err := s.toxi.bandwidth(link, 32); err != nil {
			return link + " bandwidth at " + at, err
		}
		time.Sleep(f.For)
		return fmt.Sprintf("%s bandwidth 32 KB/s at %s, removed at %s", link, at, s.since()),
			s.toxi.remove(link, "bandwidth-upstream", "bandwidth-downstream")
	case "redis-restart":
		return s.redisRestart(ctx, f.For)
	case "pg-restart":
		return s.pgRestart(ctx, f.For)
	case "redis-failover":
		return s.redisFailover(ctx, f.For)
	case "poison":
		return poison(ctx, s, act)
	case "fix-move":
		return s.fixDuringMove(ctx, f, act)
	case "preheat-cut":
		return s.preheatCut(ctx, f, act)
	case "flood-giveback":
		return s.floodGiveback(ctx, f, act)
	case "webhook-reset", "webhook-hang", "webhook-500":
		return s.inflictWebhook(f, at)
	case "clock-step":
		p := s.proc(f.Target)
		if err := p.stepClock(f.Step); err != nil {
			return "clock-step " + f.Target + " at " + at, err
		}
		time.Sleep(f.For)
		return fmt.Sprintf("clock of %s stepped by %+v at %s, back at %s", f.Target, f.Step, at, s.since()), p.stepClock(0)
	}
	return "", fmt.Errorf("unknown fault %q", f.Kind)
}

// linkOf is the proxy a link fault acts on.
func linkOf(kind string) string {
	switch {
	case strings.HasPrefix(kind, "redis-"):
		return "redis"
	case strings.HasPrefix(kind, "kafka-"):
		return "kafka"
	}
	return "postgres"
}

// pauseTarget is the process a pause of target stops: "redis" is the
// current primary, "postgres" the suite's PostgreSQL (every backend).
func (s *Suite) pauseTarget(target string) *proc {
	switch {
	case target == "redis":
		prim, _ := s.redisRoles()
		return prim.p
	case target == "postgres" && s.pg != nil:
		return s.pg
	}
	return s.proc(target)
}

// heal continues every paused process, starts every dead one, waits until
// each is ready and removes the toxics; it returns what went wrong (a
// process that died by itself is a finding).
func (s *Suite) heal(ctx context.Context) []string {
	var problems []string
	for _, p := range s.procs {
		problems = append(problems, p.takeCrashes()...)
		if err := p.stepClock(0); err != nil {
			problems = append(problems, fmt.Sprintf("setting %s's clock back: %v", p.name, err))
		}
		if p.running() && p.isPaused() {
			if err := p.resume(); err != nil {
				problems = append(problems, fmt.Sprintf("continuing %s: %v", p.name, err))
			}
		}
		if !p.running() {
			if err := p.start(); err != nil {
				problems = append(problems, fmt.Sprintf("restarting %s: %v", p.name, err))
			}
		}
		if err := p.waitReady(ctx, 90*time.Second); err != nil {
			problems = append(problems, fmt.Sprintf("healing: %v", err))
		}
	}
	if err := s.toxi.heal(); err != nil {
		problems = append(problems, fmt.Sprintf("removing toxics: %v", err))
	}
	return problems
}

// settle waits until nothing is in flight: no journal entry, pending
// compensation, consumer lag or unpaid order, and every accepted request
// decided in Postgres. Requests that stay undecided once everything else
// has been quiet for 8 s never will be (the checker reports them).
func (s *Suite) settle(ctx context.Context, act int64, items []int64, accepted []string) error {
	deadline := time.Now().Add(s.cfg.DrainWithin)
	var quietSince time.Time
	for {
		f, err := s.inFlight(ctx, act, items, accepted)
		quiet := err == nil && f.journal == 0 && f.pending == 0 && f.lag == 0 && f.unpaid == 0
		if quiet && f.decided == len(accepted) {
			return nil
		}
		switch {
		case !quiet:
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince = time.Now()
		case time.Since(quietSince) > 8*time.Second:
			return fmt.Errorf("quiet, but %d of %d accepted requests decided", f.decided, len(accepted))
		}
		if time.Now().After(deadline) {
			var dumped string
			if f.lag > 0 {
				dumped = "; " + s.dumpWorkers()
			}
			return fmt.Errorf("not drained within %s: journal %d, pending compensations %d, consumer lag %d, decided %d of %d accepted, unpaid %d (%v)%s",
				s.cfg.DrainWithin, f.journal, f.pending, f.lag, f.decided, len(accepted), f.unpaid, err, dumped)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// acceptedRequests are the requestIds some POST was answered 2xx.
func acceptedRequests(ops []Op) []string {
	seen := map[string]bool{}
	var out []string
	for _, o := range ops {
		if o.Kind == opOrder && o.ok2xx() && !seen[o.RequestID] {
			seen[o.RequestID] = true
			out = append(out, o.RequestID)
		}
	}
	return out
}

// dumpWorkers is for a consumer lag that outlived the drain: some worker
// holds a partition it does not read. Each running worker gets SIGQUIT (Go
// writes every goroutine's stack to stderr, the worker's log, and exits),
// then is started again; it says where the logs are.
func (s *Suite) dumpWorkers() string {
	var logs []string
	for _, p := range s.procs {
		if !strings.HasPrefix(p.name, "worker") || !p.running() {
			continue
		}
		if err := p.signal(syscall.SIGQUIT, 10*time.Second); err != nil {
			logs = append(logs, fmt.Sprintf("%s: %v", p.name, err))
			continue
		}
		if err := p.start(); err != nil {
			logs = append(logs, fmt.Sprintf("restarting %s: %v", p.name, err))
			continue
		}
		logs = append(logs, p.logPath)
	}
	return "every worker's goroutines (SIGQUIT) in " + strings.Join(logs, ", ")
}
