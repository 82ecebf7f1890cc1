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
