package bench

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// timeline is what the HTML report draws over time: every answer with the
// moment it came, and what the scraper read from the pipeline's /metrics.
// It stays beside the Report, out of its JSON.
type timeline struct {
	start   time.Time
	answers []answer
	procs   []procSeries
	lag     []lagSample
}

// WriteHTML writes the report as one self-contained HTML page: the figures,
// the invariants' verdict and its charts drawn as inline SVG (no script, no
// network), so the file can be mailed, archived or opened offline.
func (r *Report) WriteHTML(w io.Writer) error {
	return htmlPage.Execute(w, r.htmlView())
}

type htmlView struct {
	OpenLoop bool
	Title    string
	Summary  [][2]string
	Checks   []Check
	OK       bool
	Charts   []template.HTML
	Outcomes template.HTML
	Halves   *halvesView // nil: no floor and no --proc
}

// halvesView is the table of the floor beside the pipeline.
type halvesView struct {
	Title string
	Floor string // the floor's name; empty: the pipeline's column only
	Rows  [][4]string
	Notes []string
	Tick  string // the CPU figures' resolution
}

func (r *Report) halvesView() *halvesView {
	if r.Pipeline == nil || (r.Floor == nil && len(r.Pipeline.Procs) == 0) {
		return nil
	}
	rows := halfRows(r.Floor, r.Pipeline, r.Scenario.SoldOut)
	v := &halvesView{Title: "CPU of the named processes over the load", Notes: procNotes(r.Floor, r.Pipeline),
		Tick: fmt.Sprintf("%.2f", tickResolution(r.Pipeline.Requests))}
	if r.Floor != nil {
		v.Title = fmt.Sprintf("The floor (%s) beside the pipeline, the same %d requests each", r.Floor.Name, r.Requests)
		v.Floor, v.Rows = r.Floor.Name, rows
		return v
	}
	for _, row := range rows {
		if strings.Contains(row[0], "CPU") {
			v.Rows = append(v.Rows, row)
		}
	}
	return v
}

func (r *Report) htmlView() htmlView {
	s := r.Scenario
	loop := fmt.Sprintf("closed loop, c=%d", s.Concurrency)
	if s.Rate > 0 {
		loop = fmt.Sprintf("open loop at %.0f req/s (at most %d connections)", s.Rate, s.Concurrency)
	}
	v := htmlView{
		Title: fmt.Sprintf("orderpipe bench: %d requests, %s", r.Requests, loop),
		Summary: [][2]string{
			{"target", s.URL},
			{"sale", fmt.Sprintf("activity %d, %d item(s) × %d units, %d bucket(s), quantity %d", s.ActivityID, s.Items, s.Stock, max(s.Buckets, 1), s.Quantity)},
			{"requests", fmt.Sprintf("%d (fresh %d, retries %d, repeats %d), seed %d", r.Requests, r.Fresh, r.Retries, r.Repeats, s.Seed)},
			{"throughput", fmt.Sprintf("%.0f req/s over %.2f s", r.ReqPerSec, r.LoadMs/1000)},
			{"latency (ms)", fmt.Sprintf("p50 %.2f, p95 %.2f, p99 %.2f, p99.9 %.2f, max %.2f", r.Latency.P50, r.Latency.P95, r.Latency.P99, r.Latency.P999, r.Latency.Max)},
			{"orders in Postgres (live)", fmt.Sprintf("%d (%s)", r.OrdersInDB, countList(r.Audit.OrdersByStatus))},
			{"final stock Postgres / Redis", fmt.Sprintf("%d / %d", r.FinalDBStock, r.FinalRedisStock)},
			{"drain", fmt.Sprintf("%.0f ms after the load, %.0f ms after the last 202", r.DrainMs, r.DrainAfterLastAcceptMs)},
			{"gateway RSS", fmt.Sprintf("peak %s, end %s", unknown(r.PeakRSSBytes/(1<<20), "%.1f MiB"), unknown(r.RSSBytes/(1<<20), "%.1f MiB"))},
		},
		Checks:   r.Checks,
		OK:       r.OK,
		OpenLoop: s.Rate > 0,
	}
	v.Outcomes = outcomeBars(r)
	v.Halves = r.halvesView()
	t := r.timeline
	if t == nil || len(t.answers) == 0 {
		return v
	}
	v.Charts = append(v.Charts,
		lineChart("Latency over time", "seconds since the load began", "ms", latencyOverTime(t)),
		percentileChart("Latency by percentile", t.answers),
		lineChart("Answers per second, by outcome", "seconds since the load began", "answers/s", throughputOverTime(t)),
	)
	if rss, cpu := procCharts(t); len(rss) > 0 {
		v.Charts = append(v.Charts,
			lineChart("Resident memory per process", "seconds since the load began", "MiB", rss),
			lineChart("CPU per process", "seconds since the load began", "cores", cpu))
	}
	if lag := lagOverTime(t); len(lag) > 0 {
		v.Charts = append(v.Charts, lineChart("Consumer lag (messages not yet committed by the workers)", "seconds since the load began", "messages", lag))
	}
	return v
}

// outcome is the class of one answer, as the charts group them.
func outcomeOf(a answer) string {
	switch {
	case a.status == 0:
		return "no answer"
	case a.status == http.StatusAccepted:
		return "accepted (202)"
	case a.status == http.StatusOK:
		return "replayed (200)"
	case a.code != "":
		return a.code
	}
	return fmt.Sprintf("HTTP %d", a.status)
}

// buckets splits the run into the intervals the over-time charts plot: a
// second each, or for a run shorter than 30 s a thirtieth of it (at least
// 100 ms), so a short run is not two points. It returns the interval and
// how many there are.
func (t *timeline) buckets() (time.Duration, int) {
	var last time.Time
	for _, a := range t.answers {
		if a.end.After(last) {
			last = a.end
		}
	}
	span := max(last.Sub(t.start), time.Millisecond)
	width := time.Second
	if span < 30*time.Second {
		width = max((span / 30).Round(100*time.Millisecond), 100*time.Millisecond)
	}
	return width, int((span + width - 1) / width)
}

func (t *timeline) bucket(a answer, width time.Duration, n int) int {
	return min(max(int(a.end.Sub(t.start)/width), 0), n-1)
}

func latencyOverTime(t *timeline) []series {
	width, n := t.buckets()
	per := make([][]time.Duration, n)
	for _, a := range t.answers {
		if a.status != 0 {
			i := t.bucket(a, width, n)
			per[i] = append(per[i], a.latency)
		}
	}
	p50, p99, top := series{Name: "p50"}, series{Name: "p99"}, series{Name: "max"}
	for i, l := range per {
		if len(l) == 0 {
			continue
		}
		slices.Sort(l)
		x := (float64(i) + 0.5) * width.Seconds()
		p50.add(x, ms(pct(l, .50)))
		p99.add(x, ms(pct(l, .99)))
		top.add(x, ms(l[len(l)-1]))
	}
	return []series{p50, p99, top}
}

func throughputOverTime(t *timeline) []series {
	width, n := t.buckets()
	counts := map[string][]float64{}
	for _, a := range t.answers {
		o := outcomeOf(a)
		if counts[o] == nil {
			counts[o] = make([]float64, n)
		}
		counts[o][t.bucket(a, width, n)]++
	}
	var out []series
	for _, o := range slices.Sorted(mapsKeys(counts)) {
		s := series{Name: o}
		for i, c := range counts[o] {
			s.add((float64(i)+0.5)*width.Seconds(), c/width.Seconds())
		}
		out = append(out, s)
	}
	return out
}

func procCharts(t *timeline) (rss, cpu []series) {
	for _, p := range t.procs {
		r, c := series{Name: p.name}, series{Name: p.name}
		for i, x := range p.samples {
			at := x.at.Sub(t.start).Seconds()
			if x.rss >= 0 {
				r.add(at, x.rss/(1<<20))
			}
			if i > 0 && x.cpu >= 0 && p.samples[i-1].cpu >= 0 {
				if dt := x.at.Sub(p.samples[i-1].at).Seconds(); dt > 0 {
					c.add(at, (x.cpu-p.samples[i-1].cpu)/dt)
				}
			}
		}
		if len(r.X) > 0 {
			rss = append(rss, r)
		}
		if len(c.X) > 0 {
			cpu = append(cpu, smooth(c, 5))
		}
	}
	return rss, cpu
}

func lagOverTime(t *timeline) []series {
	s := series{} // one line: no legend
	for _, x := range t.lag {
		s.add(x.at.Sub(t.start).Seconds(), x.lag)
	}
	if len(s.X) == 0 {
		return nil
	}
	return []series{s}
}

// smooth averages each point with the k-1 before it (CPU read every 100 ms
// is too ragged to see otherwise).
func smooth(s series, k int) series {
	out := series{Name: s.Name}
	for i := range s.X {
		lo := max(0, i-k+1)
		var sum float64
		for _, y := range s.Y[lo : i+1] {
			sum += y
		}
		out.add(s.X[i], sum/float64(i+1-lo))
	}
	return out
}

// series is one line of a chart.
type series struct {
	Name string
	X, Y []float64
}

func (s *series) add(x, y float64) { s.X, s.Y = append(s.X, x), append(s.Y, y) }

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

const (
	chartW, chartH                = 760, 300
	padL, padR, padT, padB        = 64, 16, 28, 44
	plotW, plotH                  = chartW - padL - padR, chartH - padT - padB
	legendPerRow, legendRowHeight = 4, 16
)

// lineChart draws lines on linear axes from 0.
func lineChart(title, xlabel, ylabel string, lines []series) template.HTML {
	var xmax, ymax float64
	for _, l := range lines {
		for i := range l.X {
			xmax, ymax = max(xmax, l.X[i]), max(ymax, l.Y[i])
		}
	}
	xt, yt := ticks(xmax), ticks(ymax)
	xmax, ymax = xt[len(xt)-1], yt[len(yt)-1]
	px := func(x float64) float64 { return padL + x/xmax*plotW }
	py := func(y float64) float64 { return padT + plotH - y/ymax*plotH }
	var b strings.Builder
	frame(&b, title, xlabel, ylabel, legendEntries(lines))
	for _, x := range xt {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="grid"/><text x="%.1f" y="%d" class="tick" text-anchor="middle">%s</text>`,
			px(x), padT, px(x), padT+plotH, px(x), padT+plotH+14, num(x))
	}
	for _, y := range yt {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="grid"/><text x="%d" y="%.1f" class="tick" text-anchor="end">%s</text>`,
			padL, py(y), padL+plotW, py(y), padL-4, py(y)+4, num(y))
	}
	for i, l := range lines {
		polyline(&b, l, palette[i%len(palette)], px, py)
	}
	legend(&b, lines)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from numbers and escaped names
}

// percentileChart is the HDR-style plot: latency against percentile on a
// log scale of 1/(1-p), so the tail from p90 to the max is as wide as the
// body.
func percentileChart(title string, answers []answer) template.HTML {
	var lat []time.Duration
	for _, a := range answers {
		if a.status != 0 {
			lat = append(lat, a.latency)
		}
	}
	if len(lat) == 0 {
		return ""
	}
	slices.Sort(lat)
	n := float64(len(lat))
	// the last point is the max, at the percentile of one answer in n
	xmaxDecades := math.Ceil(math.Log10(n))
	s := series{Name: "latency"}
	for i := 0; i <= 400; i++ {
		d := xmaxDecades * float64(i) / 400 // decades: p = 1 - 10^-d
		p := 1 - math.Pow(10, -d)
		s.add(d, ms(pct(lat, p)))
	}
	var ymax float64
	for _, y := range s.Y {
		ymax = max(ymax, y)
	}
	yt := ticks(ymax)
	ymax = yt[len(yt)-1]
	px := func(d float64) float64 { return padL + d/xmaxDecades*plotW }
	py := func(y float64) float64 { return padT + plotH - y/ymax*plotH }
	var b strings.Builder
	frame(&b, title, "percentile (log scale of 1/(1−p))", "ms", 0)
	for d := 0.0; d <= xmaxDecades; d++ {
		label := strconv.FormatFloat(100*(1-math.Pow(10, -d)), 'f', max(int(d)-2, 0), 64) + "%"
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="grid"/><text x="%.1f" y="%d" class="tick" text-anchor="middle">%s</text>`,
			px(d), padT, px(d), padT+plotH, px(d), padT+plotH+14, label)
	}
	for _, y := range yt {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="grid"/><text x="%d" y="%.1f" class="tick" text-anchor="end">%s</text>`,
			padL, py(y), padL+plotW, py(y), padL-4, py(y)+4, num(y))
	}
	polyline(&b, s, palette[0], px, py)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from numbers
}

// outcomeBars is one bar per outcome, with its count.
func outcomeBars(r *Report) template.HTML {
	counts := map[string]int{"accepted (202)": r.Accepted, "replayed (200)": r.Replayed, "no answer": r.NoAnswer}
	for code, n := range r.RejectedByCode {
		counts[code] += n
	}
	names := slices.SortedFunc(mapsKeys(counts), func(a, b string) int { return counts[b] - counts[a] })
	names = slices.DeleteFunc(names, func(k string) bool { return counts[k] == 0 })
	if len(names) == 0 {
		return ""
	}
	top := counts[names[0]]
	const barW, rowH, labelW = 480, 22, 200
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img"><title>Answers by outcome</title>`,
		labelW+barW+120, len(names)*rowH+8)
	for i, k := range names {
		y := 4 + i*rowH
		w := float64(barW) * float64(counts[k]) / float64(top)
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="tick" text-anchor="end">%s</text><rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/><text x="%.1f" y="%d" class="tick">%d (%.1f%%)</text>`,
			labelW-6, y+15, template.HTMLEscapeString(k), labelW, y+3, max(w, 1), rowH-6, palette[i%len(palette)],
			float64(labelW)+max(w, 1)+6, y+15, counts[k], 100*float64(counts[k])/float64(max(r.Requests, 1)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // names escaped
}

// legendEntries is how many names the legend shows: none for one unnamed line.
func legendEntries(lines []series) int {
	if len(lines) == 1 && lines[0].Name == "" {
		return 0
	}
	return len(lines)
}

func frame(b *strings.Builder, title, xlabel, ylabel string, entries int) {
	h := chartH + (entries+legendPerRow-1)/legendPerRow*legendRowHeight
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img"><title>%s</title>`, chartW, h, template.HTMLEscapeString(title))
	fmt.Fprintf(b, `<text x="%d" y="16" class="title">%s</text>`, padL, template.HTMLEscapeString(title))
	fmt.Fprintf(b, `<text x="%d" y="%d" class="label" text-anchor="middle">%s</text>`, padL+plotW/2, padT+plotH+32, template.HTMLEscapeString(xlabel))
	fmt.Fprintf(b, `<text x="14" y="%d" class="label" text-anchor="middle" transform="rotate(-90 14 %d)">%s</text>`,
		padT+plotH/2, padT+plotH/2, template.HTMLEscapeString(ylabel))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" class="plot"/>`, padL, padT, plotW, plotH)
}

func polyline(b *strings.Builder, l series, color string, px, py func(float64) float64) {
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="`, color)
	for i := range l.X {
		fmt.Fprintf(b, "%.1f,%.1f ", px(l.X[i]), py(l.Y[i]))
	}
	b.WriteString(`"/>`)
}

func legend(b *strings.Builder, lines []series) {
	if legendEntries(lines) == 0 {
		return
	}
	for i, l := range lines {
		x := padL + i%legendPerRow*(plotW/legendPerRow)
		y := chartH + i/legendPerRow*legendRowHeight
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" class="tick">%s</text>`,
			x, y-9, palette[i%len(palette)], x+14, y, template.HTMLEscapeString(l.Name))
	}
}

// ticks is 0 and round steps up to at least top (1, 2 or 5 × 10^k apart).
func ticks(top float64) []float64 {
	if top <= 0 || math.IsNaN(top) || math.IsInf(top, 0) {
		return []float64{0, 1}
	}
	raw := top / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := 0.0; ; v += step {
		out = append(out, v)
		if v >= top {
			return out
		}
	}
}

func num(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e6:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return strings.TrimRight(fmt.Sprintf("%.3f", v), "0")
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var htmlPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:800px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
.ok{color:#1a7f37;font-weight:600}.fail{color:#c62828;font-weight:600}
svg{display:block;margin:8px 0}svg .grid{stroke:#eee}svg .plot{fill:none;stroke:#999}
svg .tick{font:11px sans-serif;fill:#444}svg .label{font:12px sans-serif;fill:#222}svg .title{font:bold 13px sans-serif}
</style></head><body>
<h1>{{.Title}}</h1>
<p>Verdict: {{if .OK}}<span class="ok">every invariant held</span>{{else}}<span class="fail">an invariant failed</span>{{end}}</p>
<table>{{range .Summary}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
{{with .Halves}}<h2>{{.Title}}</h2>
<table><tr><th></th>{{if .Floor}}<th>{{.Floor}}</th>{{end}}<th>pipeline</th>{{if .Floor}}<th>pipeline ÷ floor</th>{{end}}</tr>
{{range .Rows}}<tr><th>{{index . 0}}</th>{{if $.Halves.Floor}}<td>{{index . 1}}</td>{{end}}<td>{{index . 2}}</td>{{if $.Halves.Floor}}<td>{{index . 3}}</td>{{end}}</tr>
{{end}}</table>
{{range .Notes}}<p>note: {{.}}</p>{{end}}<p>CPU from /proc/PID/stat at both ends of each half (--proc), in 10 ms clock ticks: ±{{.Tick}} µs per request; latency {{if $.OpenLoop}}from each request's intended time{{else}}from each request's send{{end}}.</p>{{end}}
<h2>Invariants (the audit after the pipeline drained)</h2>
<table>{{range .Checks}}<tr><td>{{if .OK}}<span class="ok">ok</span>{{else}}<span class="fail">FAIL</span>{{end}}</td><th>{{.Name}}</th><td>{{.Detail}}</td></tr>{{end}}</table>
<h2>Answers by outcome</h2>
{{.Outcomes}}
{{if .Charts}}<h2>Over the run</h2>{{range .Charts}}{{.}}{{end}}{{else}}<p>No per-request timeline was recorded.</p>{{end}}
</body></html>
`))
