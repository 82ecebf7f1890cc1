package bench

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"orderpipe/gateway/client"
)

// The CPU each named process (--proc NAME=PID) spends during a measured
// half, read from /proc at its start and its end: the scraper's CPU series
// only reach the processes serving /metrics, and Redis, PostgreSQL and the
// floor serve none.

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux the kernel ABI allows (sysconf(_SC_CLK_TCK) without cgo).
const clockTicks = 100

// Proc is one --proc: a name and the processes counted under it (Redis,
// the PostgreSQL backends, the floor...).
type Proc struct {
	Name string
	PIDs []int
}

// procFlags is the repeatable --proc flag.
type procFlags []Proc

func (p *procFlags) String() string {
	var parts []string
	for _, x := range *p {
		parts = append(parts, x.Name+"="+joinInts(x.PIDs))
	}
	return strings.Join(parts, " ")
}

// Set parses NAME=PID[,PID...]; a name given twice adds its PIDs.
func (p *procFlags) Set(v string) error {
	pr, err := parseProc(v)
	if err != nil {
		return err
	}
	for i := range *p {
		if (*p)[i].Name == pr.Name {
			(*p)[i].PIDs = append((*p)[i].PIDs, pr.PIDs...)
			return nil
		}
	}
	*p = append(*p, pr)
	return nil
}

func parseProc(v string) (Proc, error) {
	name, list, ok := strings.Cut(v, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return Proc{}, fmt.Errorf("%q: want NAME=PID[,PID...]", v)
	}
	pr := Proc{Name: name}
	for _, s := range strings.Split(list, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || pid <= 0 {
			return Proc{}, fmt.Errorf("%q: %q is not a process id", v, s)
		}
		pr.PIDs = append(pr.PIDs, pid)
	}
	return pr, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// procTimes is one reading of a process: CPU used (user + system) and time
// its threads waited runnable for a core, since it started.
type procTimes struct {
	cpu, wait time.Duration
	waitOK    bool // schedstat readable (kernels without CONFIG_SCHEDSTATS have none)
}

// readProcTimes reads /proc/PID/stat and /proc/PID/task/*/schedstat.
func readProcTimes(pid int) (procTimes, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return procTimes{}, fmt.Errorf("pid %d: no such process", pid)
		}
		return procTimes{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces and
	// parentheses itself; the fields after the last ')' start at field 3.
	i := strings.LastIndexByte(string(raw), ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("pid %d: unreadable stat %.80q", pid, raw)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return procTimes{}, fmt.Errorf("pid %d: short stat %.80q", pid, raw)
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return procTimes{}, fmt.Errorf("pid %d: unreadable stat %.80q", pid, raw)
		}
		ticks += n
	}
	t := procTimes{cpu: time.Duration(ticks) * time.Second / clockTicks}
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			continue // a thread that ended meanwhile
		}
		if f := strings.Fields(string(raw)); len(f) >= 2 {
			if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				t.wait += time.Duration(ns)
				t.waitOK = true
			}
		}
	}
	return t, nil
}

// ProcCPU is what one named process used during a measured half.
type ProcCPU struct {
	Name       string  `json:"name"`
	PIDs       []int   `json:"pids"`
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUPerRequest is µs of CPU per request of the half; WaitPerRequest µs
	// its threads waited runnable for a core (-1: not readable).
	CPUPerRequest  float64 `json:"cpuUsPerRequest"`
	WaitPerRequest float64 `json:"waitUsPerRequest"`
	// Note says which PIDs could not be read at one end: they are left out
	// of the figures, which then undercount.
	Note string `json:"note,omitempty"`
}

// procMeter holds the first reading of every --proc of a half.
type procMeter struct {
	procs  []Proc
	before map[int]procTimes
	errs   map[int]error
}

func startProcMeter(procs []Proc) *procMeter {
	m := &procMeter{procs: procs, before: map[int]procTimes{}, errs: map[int]error{}}
	for _, p := range procs {
		for _, pid := range p.PIDs {
			if t, err := readProcTimes(pid); err != nil {
				m.errs[pid] = err
			} else {
				m.before[pid] = t
			}
		}
	}
	return m
}

// stop reads every process again and charges what each used to the half's
// requests.
func (m *procMeter) stop(requests int) []ProcCPU {
	var out []ProcCPU
	for _, p := range m.procs {
		pc := ProcCPU{Name: p.Name, PIDs: p.PIDs}
		var cpu, wait time.Duration
		waitOK := true
		var missing []string
		for _, pid := range p.PIDs {
			b, ok := m.before[pid]
			if !ok {
				missing = append(missing, fmt.Sprintf("%v at the start", m.errs[pid]))
				continue
			}
			a, err := readProcTimes(pid)
			if err != nil {
				missing = append(missing, fmt.Sprintf("%v at the end", err))
				continue
			}
			cpu += a.cpu - b.cpu
			wait += a.wait - b.wait
			waitOK = waitOK && a.waitOK && b.waitOK
		}
		pc.CPUSeconds = cpu.Seconds()
		pc.CPUPerRequest, pc.WaitPerRequest = -1, -1
		if len(missing) < len(p.PIDs) && requests > 0 {
			pc.CPUPerRequest = float64(cpu.Microseconds()) / float64(requests)
			if waitOK {
				pc.WaitPerRequest = float64(wait.Microseconds()) / float64(requests)
			}
		}
		if len(missing) > 0 {
			pc.Note = "not counted: " + strings.Join(missing, "; ")
		}
		out = append(out, pc)
	}
	return out
}

// Half is one measured half of a run: with --floor-url the floor's, then
// the pipeline's, each sent the same requests the same way (open loop at
// one rate, or closed loop at one concurrency); without, the pipeline's only.
type Half struct {
	Name      string  `json:"name"`
	URL       string  `json:"url"`
	Requests  int     `json:"requests"`
	Seconds   float64 `json:"seconds"`
	ReqPerSec float64 `json:"reqPerSec"` // achieved: requests ÷ seconds
	// Refusals are the definite noes (SOLD_OUT, NOT_ON_SALE,
	// ALREADY_PURCHASED…): a 4xx the client must not retry.
	Refusals       int       `json:"refusals"`
	RefusalsPerSec float64   `json:"refusalsPerSec"`
	Latency        Latency   `json:"latencyMs"`
	Procs          []ProcCPU `json:"procs,omitempty"` // --proc, in the order given
}

// refused says an answer is a refusal: a 4xx other than those the client
// retries (429, ORDER_PENDING, IDEMPOTENCY_KEY_IN_PROGRESS).
func refused(a answer) bool {
	return a.status >= 400 && a.status < 500 && a.status != http.StatusTooManyRequests &&
		a.code != string(client.CodeOrderPending) && a.code != string(client.CodeKeyInProgress)
}

// newHalf sums one half's answers; elapsed is its wall time.
func newHalf(name, url string, answers []answer, elapsed time.Duration, procs []ProcCPU) *Half {
	h := &Half{Name: name, URL: url, Requests: len(answers), Seconds: elapsed.Seconds(), Procs: procs}
	lat := make([]time.Duration, len(answers))
	for i, a := range answers {
		lat[i] = a.latency
		if refused(a) {
			h.Refusals++
		}
	}
	h.Latency = latencyOf(lat)
	if elapsed > 0 {
		h.ReqPerSec = float64(h.Requests) / elapsed.Seconds()
		h.RefusalsPerSec = float64(h.Refusals) / elapsed.Seconds()
	}
	return h
}

// cpuPerRefusal is µs of p's CPU per refusal of h (-1: none, or unread).
func (h *Half) cpuPerRefusal(p ProcCPU) float64 {
	if h.Refusals == 0 || p.CPUPerRequest < 0 {
		return -1
	}
	return 1e6 * p.CPUSeconds / float64(h.Refusals)
}

// halfRows is the floor beside the pipeline, one row per figure: name, the
// floor's, the pipeline's and pipeline ÷ floor (floor nil: the pipeline's
// alone). The text and the HTML report both print them.
func halfRows(floor, pipe *Half, soldOut bool) [][4]string {
	var rows [][4]string
	for _, f := range halfFigures(pipe, soldOut) {
		rows = append(rows, f.row(floor, pipe))
	}
	return rows
}

// halfFigure is one row of halfRows: how to read the figure from a half
// (-1: unknown) and how to print it.
type halfFigure struct {
	name, format string
	val          func(h *Half) float64
}

// row prints the figure of both halves and their ratio.
func (f halfFigure) row(floor, pipe *Half) [4]string {
	r := [4]string{f.name, "", "", ""}
	p := f.val(pipe)
	r[2] = unknown(p, f.format)
	if floor == nil {
		return r
	}
	fl := f.val(floor)
	r[1] = unknown(fl, f.format)
	// A process idle in one half (the floor's while the pipeline
	// runs) has CPU but no ratio worth printing.
	if fl > 0 && (p > 0 || !strings.Contains(f.name, "CPU") && p == 0) {
		r[3] = fmt.Sprintf("×%.2f", p/fl)
	}
	return r
}

// halfFigures lists the latency and rate figures, then each named process's
// CPU, in the pipeline's process order.
func halfFigures(pipe *Half, soldOut bool) []halfFigure {
	figs := []halfFigure{
		{"P50 ms", "%.2f", func(h *Half) float64 { return h.Latency.P50 }},
		{"P90 ms", "%.2f", func(h *Half) float64 { return h.Latency.P90 }},
		{"P99 ms", "%.2f", func(h *Half) float64 { return h.Latency.P99 }},
		{"P99.9 ms", "%.2f", func(h *Half) float64 { return h.Latency.P999 }},
		{"max ms", "%.2f", func(h *Half) float64 { return h.Latency.Max }},
		{"requests/s achieved", "%.0f", func(h *Half) float64 { return h.ReqPerSec }},
		{"refusals/s", "%.0f", func(h *Half) float64 { return h.RefusalsPerSec }},
	}
	for i, p := range pipe.Procs {
		figs = append(figs, procFigures(i, p.Name, soldOut)...)
	}
	if len(pipe.Procs) > 1 {
		figs = append(figs, halfFigure{"all named CPU µs/request", "%.1f", totalCPUPerRequest})
	}
	return figs
}

// procFigures are the CPU figures of the i-th named process. A half whose
// i-th process is another one (or missing) reads as unknown: the floor runs
// fewer processes than the pipeline.
func procFigures(i int, name string, soldOut bool) []halfFigure {
	get := func(h *Half) (ProcCPU, bool) {
		if i < len(h.Procs) && h.Procs[i].Name == name {
			return h.Procs[i], true
		}
		return ProcCPU{}, false
	}
	figs := []halfFigure{{name + " CPU µs/request", "%.1f", func(h *Half) float64 {
		if pc, ok := get(h); ok {
			return pc.CPUPerRequest
		}
		return -1
	}}}
	if soldOut {
		figs = append(figs, halfFigure{name + " CPU µs/refusal", "%.1f", func(h *Half) float64 {
			if pc, ok := get(h); ok {
				return h.cpuPerRefusal(pc)
			}
			return -1
		}})
	}
	return append(figs, halfFigure{name + " CPU s", "%.2f", func(h *Half) float64 {
		if pc, ok := get(h); ok && pc.CPUPerRequest >= 0 {
			return pc.CPUSeconds
		}
		return -1
	}})
}

// totalCPUPerRequest sums a half's named processes (-1 if any is unread).
func totalCPUPerRequest(h *Half) float64 {
	var sum float64
	for _, p := range h.Procs {
		if p.CPUPerRequest < 0 {
			return -1
		}
		sum += p.CPUPerRequest
	}
	return sum
}

// tickResolution is the CPU per request one clock tick of /proc/PID/stat
// amounts to over n requests, in µs: the figures' resolution.
func tickResolution(n int) float64 { return 1e6 / clockTicks / float64(max(n, 1)) }

// procNotes are the --proc processes a half could not read, one line each.
func procNotes(halves ...*Half) []string {
	var out []string
	for _, h := range halves {
		if h == nil {
			continue
		}
		for _, p := range h.Procs {
			if p.Note != "" {
				out = append(out, fmt.Sprintf("%s, %s: %s", h.Name, p.Name, p.Note))
			}
		}
	}
	return out
}
