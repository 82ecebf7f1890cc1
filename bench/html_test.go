package bench

import (
	"encoding/xml"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHTMLReportIsSelfContained renders a report of a made-up run and reads
// the page back: every chart is there as inline SVG that parses as XML,
// nothing is fetched from anywhere, and a failed invariant is shown failed.
func TestHTMLReportIsSelfContained(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	var answers []answer
	for i := range 3000 {
		a := answer{status: http.StatusAccepted, latency: time.Duration(1+i%50) * time.Millisecond, end: start.Add(time.Duration(i) * time.Millisecond)}
		switch i % 10 {
		case 7:
			a.status, a.code = http.StatusConflict, "SOLD_OUT"
		case 8:
			a.status, a.replayed = http.StatusOK, true
		case 9:
			a.status = 0
		}
		answers = append(answers, a)
	}
	var gw procSeries
	gw.name = "gateway"
	for i := range 30 {
		gw.samples = append(gw.samples, procSample{at: start.Add(time.Duration(i) * 100 * time.Millisecond), rss: float64(40+i) * (1 << 20), cpu: float64(i) * 0.05})
	}
	r := &Report{Requests: len(answers), Accepted: 2100, Replayed: 300, NoAnswer: 300, RejectedByCode: map[string]int{"SOLD_OUT": 300},
		Checks:   []Check{{Name: "I1 no oversell", OK: true, Detail: "ok"}, {Name: "I4 nothing lost", Detail: "2 accepted requests <lost>"}},
		timeline: &timeline{start: start, answers: answers, procs: []procSeries{gw}, lag: []lagSample{{start, 5}, {start.Add(time.Second), 0}}}}
	var b strings.Builder
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{"Latency over time", "Latency by percentile", "Answers per second, by outcome",
		"Resident memory per process", "CPU per process", "Consumer lag", "99.9%", "SOLD_OUT", "an invariant failed",
		"2 accepted requests &lt;lost&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`(?i)<script|<link|<img|\ssrc=|href=|@import|url\(`).FindString(page); m != "" {
		t.Errorf("the page refers outside itself: %q", m)
	}
	svgs := regexp.MustCompile(`(?s)<svg.*?</svg>`).FindAllString(page, -1)
	if len(svgs) != 7 { // outcomes + six charts
		t.Errorf("%d SVG drawings, want 7", len(svgs))
	}
	for _, svg := range svgs {
		if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
			t.Errorf("an SVG drawing does not parse: %v", err)
		}
		if strings.Contains(svg, "NaN") || strings.Contains(svg, "Inf") {
			t.Errorf("an SVG drawing has a coordinate that is not a number")
		}
	}

	// A run the report kept no timeline of still renders, saying so.
	r.timeline = nil
	b.Reset()
	if err := r.WriteHTML(&b); err != nil || !strings.Contains(b.String(), "No per-request timeline") {
		t.Errorf("without a timeline: %v", err)
	}
}

// TestTicks: an axis starts at 0, reaches the top and has a few even steps.
func TestTicks(t *testing.T) {
	for _, top := range []float64{0, 0.3, 1, 7, 99.5, 1234, 2.5e6} {
		ts := ticks(top)
		if ts[0] != 0 || ts[len(ts)-1] < top || len(ts) < 2 || len(ts) > 7 {
			t.Errorf("ticks(%v) = %v", top, ts)
			continue
		}
		for i := 2; i < len(ts); i++ {
			if d, d0 := ts[i]-ts[i-1], ts[1]-ts[0]; d < d0*0.999 || d > d0*1.001 {
				t.Errorf("ticks(%v) = %v: uneven", top, ts)
			}
		}
	}
}

// TestHTMLFloorBesidePipeline: with a floor the page has the table of both
// halves (percentiles, rates, refusals, CPU per request of each --proc, per
// refusal in a sold-out flood, a note for a process it could not read);
// without a floor only the CPU rows, and without --proc no table at all.
func TestHTMLFloorBesidePipeline(t *testing.T) {
	lat := Latency{P50: 1, P90: 2, P99: 4, P999: 8, Max: 16}
	floor := &Half{Name: "trivial handler", Requests: 10000, Seconds: 1, ReqPerSec: 10000, Refusals: 10000, RefusalsPerSec: 10000,
		Latency: lat, Procs: []ProcCPU{{Name: "floor", CPUSeconds: 0.2, CPUPerRequest: 20}, {Name: "redis", CPUSeconds: 0, CPUPerRequest: 0},
			{Name: "postgres", CPUPerRequest: -1, Note: "not counted: pid 9: no such process at the start"}}}
	pipe := &Half{Name: "pipeline", Requests: 10000, Seconds: 2.5, ReqPerSec: 4000, Refusals: 10000, RefusalsPerSec: 4000,
		Latency: Latency{P50: 3, P90: 5, P99: 12, P999: 20, Max: 31},
		Procs: []ProcCPU{{Name: "floor", CPUPerRequest: 0}, {Name: "redis", CPUSeconds: 0.15, CPUPerRequest: 15},
			{Name: "postgres", CPUSeconds: 0.01, CPUPerRequest: 1}}}
	r := &Report{Scenario: Scenario{Concurrency: 100, Requests: 10000, SoldOut: true}, Requests: 10000,
		RejectedByCode: map[string]int{"SOLD_OUT": 10000}, Floor: floor, Pipeline: pipe}
	page := func() string {
		t.Helper()
		var b strings.Builder
		if err := r.WriteHTML(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	row := func(cells ...string) string { // one table row, as rendered
		return "<tr><th>" + cells[0] + "</th><td>" + strings.Join(cells[1:], "</td><td>") + "</td></tr>"
	}
	p := page()
	for _, want := range []string{
		"The floor (trivial handler) beside the pipeline, the same 10000 requests each",
		"<th>trivial handler</th><th>pipeline</th><th>pipeline ÷ floor</th>",
		row("P50 ms", "1.00", "3.00", "×3.00"),
		row("P90 ms", "2.00", "5.00", "×2.50"),
		row("P99 ms", "4.00", "12.00", "×3.00"),
		row("P99.9 ms", "8.00", "20.00", "×2.50"),
		row("max ms", "16.00", "31.00", "×1.94"),
		row("requests/s achieved", "10000", "4000", "×0.40"),
		row("refusals/s", "10000", "4000", "×0.40"),
		row("floor CPU µs/request", "20.0", "0.0", ""),
		row("redis CPU µs/request", "0.0", "15.0", ""),
		row("redis CPU µs/refusal", "0.0", "15.0", ""),
		row("postgres CPU µs/request", "n/a", "1.0", ""),
		row("all named CPU µs/request", "n/a", "16.0", ""),
		"in 10 ms clock ticks: ±1.00 µs per request",
		"note: trivial handler, postgres: not counted: pid 9: no such process at the start",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("with a floor, the page lacks %q", want)
		}
	}
	var text strings.Builder
	r.WriteText(&text)
	if !strings.Contains(text.String(), "trivial handler beside the pipeline") || !strings.Contains(text.String(), "redis CPU µs/refusal") {
		t.Errorf("the text report lacks the halves:\n%s", text.String())
	}

	r.Floor, r.Scenario.SoldOut = nil, false
	p = page()
	if strings.Contains(p, "beside the pipeline") || strings.Contains(p, "pipeline ÷ floor") || strings.Contains(p, "P50 ms") {
		t.Error("without a floor, the page still compares with one")
	}
	if !strings.Contains(p, "CPU of the named processes over the load") || !strings.Contains(p, "<tr><th>redis CPU µs/request</th><td>15.0</td></tr>") ||
		strings.Contains(p, "µs/refusal") {
		t.Error("without a floor, the page lacks the pipeline's CPU per request (or shows per refusal outside a flood)")
	}

	r.Pipeline.Procs = nil
	if p = page(); strings.Contains(p, "CPU of the named processes") {
		t.Error("without a floor or --proc, the page has a table of nothing")
	}
}
