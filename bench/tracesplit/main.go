// Command tracesplit reads a Go execution trace of an HTTP/1 server (the
// gateway's /debug/pprof/trace) and splits each request's time on the server:
// running, runnable (ready, waiting for a P), and blocked, by what it was
// blocked in. It prints the requests' percentiles and the split for all of
// them, the slowest 5 % and the slowest 1 %, so the tail can be read apart
// from the median: bench/latency.sh runs it on its PROFILE trace.
//
//	go run ./bench/tracesplit bin/bench/latency-<run>-2000.trace
//	go run ./bench/tracesplit -wait redis=go-redis -wait produce=pkg/event. FILE
//
// A request runs from its connection's goroutine becoming ready after
// waiting for the request's bytes (or, on a keep-alive connection whose next
// request was already there, from the end of the previous answer's write) to
// the start of its answer's write: the time before the server's goroutine was
// made ready (the client, the network, the netpoller) is not in it.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/exp/trace"
)

// waitClass names blocked time by the first pattern found in the blocking
// stack's function names.
type waitClass struct{ name, pattern string }

type waitFlags []waitClass

func (w *waitFlags) String() string { return fmt.Sprint(*w) }

func (w *waitFlags) Set(s string) error {
	name, pattern, ok := strings.Cut(s, "=")
	if !ok || name == "" || pattern == "" {
		return fmt.Errorf("want NAME=PATTERN, got %q", s)
	}
	*w = append(*w, waitClass{name, pattern})
	return nil
}

// defaultWaits are the gateway's order path: the reserve script's pipeline
// and the event's produce.
var defaultWaits = waitFlags{{"reserve", "orderpipe/pkg/stock."}, {"produce", "orderpipe/pkg/event."}}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tracesplit:", err)
		os.Exit(2)
	}
}

func run(args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("tracesplit", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var waits waitFlags
	fs.Var(&waits, "wait", "NAME=PATTERN: blocked time whose stack has a function containing PATTERN counts as NAME (repeatable; default reserve=orderpipe/pkg/stock. produce=orderpipe/pkg/event.)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: tracesplit [-wait NAME=PATTERN]... FILE.trace")
	}
	if len(waits) == 0 {
		waits = defaultWaits
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	reqs, err := split(f, waits)
	if err != nil {
		return err
	}
	return report(out, reqs)
}

// request is one request's time on the server, in nanoseconds.
type request struct {
	total, running, runnable int64
	blocked                  map[string]int64
}

// conn follows one goroutine.
type conn struct {
	http    bool     // it has blocked inside net/http's connection loop
	cur     *request // the request it is serving, if any
	since   trace.Time
	blocked string // what it is blocked in, while waiting
	idle    bool   // waiting for a request's bytes
	// next: the answer's write has begun; from its end the goroutine
	// serves the next request if its bytes are already there (cur is then
	// that request), else it waits for them and cur is dropped.
	next bool
}

// split reads the trace and returns the requests it saw from start to end.
// A request ends where the server starts writing its answer
// (net/http.(*response).finishRequest's write).
func split(r io.Reader, waits []waitClass) ([]request, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("reading trace: %w", err)
	}
	gs := map[trace.GoID]*conn{}
	var reqs []request
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading trace: %w", err)
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		g := gs[id]
		if g == nil {
			g = &conn{}
			gs[id] = g
		}
		from, to := st.Goroutine()
		g.spend(from, ev.Time())
		if done := g.step(st, waits); done != nil {
			reqs = append(reqs, *done)
		}
		if to == trace.GoNotExist {
			delete(gs, id)
		}
	}
	return reqs, nil
}

// spend charges the time since the goroutine's last transition to its
// request, under the state it is leaving.
func (g *conn) spend(from trace.GoState, now trace.Time) {
	if g.cur != nil {
		d := int64(now - g.since)
		switch from {
		case trace.GoRunning:
			g.cur.running += d
		case trace.GoRunnable:
			g.cur.runnable += d
		case trace.GoWaiting, trace.GoSyscall:
			g.cur.blocked[g.blocked] += d
		}
		g.cur.total += d
	}
	g.since = now
}

// step follows the goroutine into its new state: where a request starts,
// what it blocks in, and the request that ended here, if one did.
func (g *conn) step(st trace.StateTransition, waits []waitClass) (done *request) {
	from, to := st.Goroutine()
	switch {
	case to == trace.GoSyscall:
		g.blocked = "syscall"
		if has(funcs(st.Stack), "net/http.(*response).finishRequest") {
			// A connection already waiting when the trace began shows
			// where it waited only from its first answer on: its first
			// request here has no known start and is left out.
			done = g.cur
			g.cur, g.next = nil, true
		}
	case from == trace.GoSyscall && g.next:
		g.cur, g.next = &request{blocked: map[string]int64{}}, false
	case to == trace.GoWaiting:
		g.block(funcs(st.Stack), st.Reason, waits)
	case to == trace.GoRunnable && from == trace.GoWaiting && g.idle:
		g.cur = &request{blocked: map[string]int64{}}
		g.idle = false
	}
	return done
}

// block notes what the goroutine now waits in; waiting for a request's bytes
// ends the request it was serving.
func (g *conn) block(names []string, reason string, waits []waitClass) {
	if has(names, "net/http.(*conn).serve") {
		g.http = true
	}
	// Reading inside a handler is its request's body, not the next request.
	g.idle = g.http && has(names, "net/http.(*connReader).Read") && !has(names, "ServeHTTP")
	if g.idle {
		g.cur, g.next = nil, false
	}
	g.blocked = classify(names, reason, waits)
}

func funcs(st trace.Stack) []string {
	var names []string
	for f := range st.Frames() {
		names = append(names, f.Func)
	}
	return names
}

func has(names []string, s string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, s) })
}

func classify(names []string, reason string, waits []waitClass) string {
	for _, w := range waits {
		if has(names, w.pattern) {
			return w.name
		}
	}
	if reason == "" {
		reason = "unknown"
	}
	return "other (" + reason + ")"
}

func report(out io.Writer, reqs []request) error {
	if len(reqs) == 0 {
		return errors.New("no complete HTTP/1 request in the trace (was it taken from a server under load?)")
	}
	slices.SortFunc(reqs, func(a, b request) int { return cmp.Compare(a.total, b.total) })
	n := len(reqs)
	at := func(p float64) float64 { return ms(reqs[min(n-1, int(p*float64(n)))].total) }
	fmt.Fprintf(out, "%d requests on the server: P50 %.3f  P90 %.3f  P99 %.3f  P99.9 %.3f  max %.3f ms\n",
		n, at(0.5), at(0.9), at(0.99), at(0.999), ms(reqs[n-1].total))
	fmt.Fprintf(out, "%-17s  %8s  %8s  %8s  %s\n", "requests", "mean ms", "running", "runnable", "blocked in (ms)")
	for _, part := range []struct {
		name string
		from int
	}{{"all", 0}, {"slowest 5%", n - max(1, n/20)}, {"slowest 1%", n - max(1, n/100)}} {
		s := mean(reqs[part.from:])
		var b []string
		for _, k := range s.order {
			b = append(b, fmt.Sprintf("%s %.3f", k, s.blocked[k]))
		}
		fmt.Fprintf(out, "%-17s  %8.3f  %8.3f  %8.3f  %s\n", fmt.Sprintf("%s (%d)", part.name, n-part.from),
			s.total, s.running, s.runnable, strings.Join(b, ", "))
	}
	return nil
}

type summary struct {
	total, running, runnable float64
	blocked                  map[string]float64
	order                    []string // blocked's keys, the longest first
}

func mean(rs []request) summary {
	s := summary{blocked: map[string]float64{}}
	for _, r := range rs {
		s.total += ms(r.total)
		s.running += ms(r.running)
		s.runnable += ms(r.runnable)
		for k, v := range r.blocked {
			s.blocked[k] += ms(v)
		}
	}
	n := float64(len(rs))
	s.total, s.running, s.runnable = s.total/n, s.running/n, s.runnable/n
	for k := range s.blocked {
		s.blocked[k] /= n
		if s.blocked[k] >= 0.0005 {
			s.order = append(s.order, k)
		}
	}
	slices.SortFunc(s.order, func(a, b string) int {
		return cmp.Or(cmp.Compare(s.blocked[b], s.blocked[a]), strings.Compare(a, b))
	})
	return s
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }
