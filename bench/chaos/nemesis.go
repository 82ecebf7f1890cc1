package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// The nemesis: during a storefront load it injects faults at random
// instants, possibly overlapping — components SIGKILLed and restarted, any
// process (the brokers too) paused with SIGSTOP and continued, Postgres
// slowed or reset through Toxiproxy, poison messages — then heals, drains
// and hands the history to the checker. The schedule is a pure function of
// the seed and the process names, printed before the run, so a failing run
// is repeated with CHAOS_SEED.

// fault is one entry of the schedule.
type fault struct {
	At     time.Duration // into the load
	For    time.Duration // down, paused or toxic for
	Kind   string        // kill, pause, pg-latency, pg-reset, poison
	Target string        // a process name, "postgres" or "topic"
}

func (f fault) String() string {
	if f.Kind == "poison" {
		return fmt.Sprintf("+%.1fs poison %s", f.At.Seconds(), f.Target)
	}
	return fmt.Sprintf("+%.1fs %s %s for %s", f.At.Seconds(), f.Kind, f.Target, f.For.Round(10*time.Millisecond))
}

// nemesisSchedule draws the faults of a load of loadFor from seed: about
// one every 1.2 s between 10% and 80% of the load, each from the menu with
// these weights; a target already in a fault is not hit again until that
// one healed (a killed process needs ~2 s to be ready again).
//
//	3 pause a broker 1–5 s (longer than PRODUCE_TIMEOUT, sometimes)
//	3 SIGKILL a gateway, worker or closer, restart after 0.2–2 s
//	3 pause a gateway, worker or closer 0.3–3.3 s
//	1 Postgres latency 300±100 ms for 1–3 s (workers and closer)
//	1 Postgres connections reset for 0.3–1.5 s
//	1 three poison messages
func nemesisSchedule(seed uint64, loadFor time.Duration, comps, brokers []string) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	busy := map[string]time.Duration{}
	var out []fault
	t := loadFor / 10
	for {
		t += time.Duration(rng.ExpFloat64() * float64(1200*time.Millisecond))
		if t > loadFor*8/10 {
			return out
		}
		var f fault
		switch r := rng.IntN(12); {
		case r < 3:
			f = fault{Kind: "pause", Target: brokers[rng.IntN(len(brokers))], For: between(time.Second, 5*time.Second)}
		case r < 6:
			f = fault{Kind: "kill", Target: comps[rng.IntN(len(comps))], For: between(200*time.Millisecond, 2*time.Second)}
		case r < 9:
			f = fault{Kind: "pause", Target: comps[rng.IntN(len(comps))], For: between(300*time.Millisecond, 3300*time.Millisecond)}
		case r < 10:
			f = fault{Kind: "pg-latency", Target: "postgres", For: between(time.Second, 3*time.Second)}
		case r < 11:
			f = fault{Kind: "pg-reset", Target: "postgres", For: between(300*time.Millisecond, 1500*time.Millisecond)}
		default:
			f = fault{Kind: "poison", Target: "topic"}
		}
		if busy[f.Target] > t {
			continue
		}
		f.At = t
		busy[f.Target] = t + f.For
		if f.Kind == "kill" {
			busy[f.Target] += 2 * time.Second
		}
		out = append(out, f)
	}
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
	return fmt.Sprintf("nemesis seed=%-6d faults=%-2d requests=%-5d calls=%-5d accepted=%-5d timeouts=%-4d orders=%-5d violations=%d result=%s",
		r.Seed, len(r.Schedule), c.requests, c.calls, c.accepted, c.timeouts, c.orders, len(c.violations)+len(r.Problems), result)
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
		fmt.Fprintf(&b, "  answers to POST /v1/orders %v; replays answered 2xx %d; given up %d; pays %v\n",
			c.answers, c.replays, c.gaveUp, c.pays)
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
	var comps, brokers []string
	for _, p := range s.procs {
		switch {
		case strings.HasPrefix(p.name, "kafka"):
			brokers = append(brokers, p.name)
		default:
			comps = append(comps, p.name)
		}
	}
	res.Schedule = nemesisSchedule(nc.Seed, nc.LoadFor, comps, brokers)
	s.logf("nemesis seed %d on sale %d, %s of load, %d faults:", nc.Seed, act, nc.LoadFor, len(res.Schedule))
	for _, f := range res.Schedule {
		s.logf("  %s", f)
	}
	if err := s.createSale(ctx, act, items); err != nil {
		fail("creating the sale: %v", err)
		return res
	}
	stop := make(chan struct{})
	sc := storefrontConfig{URLs: s.httpURLs, ActivityID: act, Items: items, Users: s.cfg.Users, Clients: s.cfg.Clients,
		Think: s.cfg.Think, Stop: stop, RetryFor: 10 * time.Second, Seed: nc.Seed, Timeouts: nc.Timeouts,
		PayShare: 0.3, PollShare: 0.2, ReplayShare: 0.15, GiveUpShare: 0.08, LaterShare: 0.12}
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
		s.logf("nemesis seed %d: %v (the checker says what is missing)", nc.Seed, err)
	}
	res.Drained = time.Since(drainStart)
	check, err := s.checkHistory(ctx, act, items, hist.t0, ops)
	if err != nil {
		fail("checking: %v", err)
		return res
	}
	res.Check = check
	if check.reconcileExit != 0 {
		// The next run's reconciler check is about that run only.
		if code, out := s.reconcile(ctx, "--fix"); code != 0 {
			fail("reconciler --fix after the run: exit %d:\n%s", code, out)
		}
	}
	return res
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
		p := s.proc(f.Target)
		if err := p.pause(); err != nil {
			return "SIGSTOP " + f.Target + " at " + at, err
		}
		time.Sleep(f.For)
		return fmt.Sprintf("SIGSTOP %s at %s, SIGCONT at %s", f.Target, at, s.since()), p.resume()
	case "pg-latency":
		if err := s.toxi.latency(300, 100); err != nil {
			return "postgres latency at " + at, err
		}
		time.Sleep(f.For)
		return fmt.Sprintf("postgres latency 300±100ms at %s, removed at %s", at, s.since()), s.toxi.remove("latency")
	case "pg-reset":
		if err := s.toxi.resetPeer(1); err != nil {
			return "postgres reset at " + at, err
		}
		time.Sleep(f.For)
		return fmt.Sprintf("postgres reset_peer at %s, removed at %s", at, s.since()), s.toxi.remove("reset")
	case "poison":
		return poison(ctx, s, act)
	}
	return "", fmt.Errorf("unknown fault %q", f.Kind)
}

// heal continues every paused process, starts every dead one, waits until
// each is ready and removes the toxics; it returns what went wrong (a
// process that died by itself is a finding).
func (s *Suite) heal(ctx context.Context) []string {
	var problems []string
	for _, p := range s.procs {
		problems = append(problems, p.takeCrashes()...)
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
			return fmt.Errorf("not drained within %s: journal %d, pending compensations %d, consumer lag %d, decided %d of %d accepted, unpaid %d (%v)",
				s.cfg.DrainWithin, f.journal, f.pending, f.lag, f.decided, len(accepted), f.unpaid, err)
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
