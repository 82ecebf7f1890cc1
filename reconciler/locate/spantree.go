package locate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"orderpipe/pkg/telemetry"
)

// SpanTree draws a trace's spans as a tree, parents above their children
// (ordered by start), each with its duration and its start relative to the
// trace's first span. A span whose parent is not among spans (the caller's,
// or one not exported yet) is drawn as a root.
func SpanTree(spans []telemetry.StoredSpan) string {
	if len(spans) == 0 {
		return ""
	}
	t := spanTree{start: spans[0].Start, seen: map[string]bool{}}
	for _, s := range spans {
		if s.Start.Before(t.start) {
			t.start = s.Start
		}
	}
	var roots []telemetry.StoredSpan
	roots, t.children = arrange(spans)
	slices.SortStableFunc(roots, byStart)
	for _, r := range roots {
		t.draw(r, "", true, true)
	}
	return t.b.String()
}

func byStart(a, b telemetry.StoredSpan) int { return a.Start.Compare(b.Start) }

// arrange puts each span under its parent: the span it names as parent, else
// (a root of a linked trace, such as the worker's batch span) the span that
// links to it, else the span it links to. A span with none of them among
// spans is a root.
func arrange(spans []telemetry.StoredSpan) (roots []telemetry.StoredSpan, children map[string][]telemetry.StoredSpan) {
	present := make(map[string]bool, len(spans))
	for _, s := range spans {
		present[s.SpanID] = true
	}
	linkedFrom := map[string]string{}
	for _, s := range spans {
		for _, l := range s.Links {
			if sid := linkedSpan(l); present[sid] {
				linkedFrom[sid] = s.SpanID
			}
		}
	}
	children = map[string][]telemetry.StoredSpan{}
	for _, s := range spans {
		if parent := parentOf(s, present, linkedFrom); parent != "" && parent != s.SpanID {
			children[parent] = append(children[parent], s)
		} else {
			roots = append(roots, s)
		}
	}
	return roots, children
}

// parentOf is the span s is drawn under ("" for a root).
func parentOf(s telemetry.StoredSpan, present map[string]bool, linkedFrom map[string]string) string {
	if s.ParentID != "" && present[s.ParentID] {
		return s.ParentID
	}
	if from := linkedFrom[s.SpanID]; from != "" {
		return from
	}
	for _, l := range s.Links {
		if sid := linkedSpan(l); present[sid] {
			return sid
		}
	}
	return ""
}

// linkedSpan is the span id of a link ("<trace id>-<span id>").
func linkedSpan(link string) string {
	_, sid, _ := strings.Cut(link, "-")
	return sid
}

// spanTree is a tree being drawn.
type spanTree struct {
	b        strings.Builder
	start    time.Time // the trace's first span's: every start is shown from it
	children map[string][]telemetry.StoredSpan
	seen     map[string]bool // drawn already: a cycle of links draws each span once
}

// draw writes s as one line under prefix, then its children below it,
// ordered by start.
func (t *spanTree) draw(s telemetry.StoredSpan, prefix string, last, root bool) {
	if t.seen[s.SpanID] {
		return
	}
	t.seen[s.SpanID] = true
	branch, next := "", ""
	if !root {
		branch, next = "├─ ", "│  "
		if last {
			branch, next = "└─ ", "   "
		}
	}
	fmt.Fprintf(&t.b, "%s%s%s  %s  +%s", prefix, branch, s.Name, fmtDur(s.Duration()), fmtDur(s.Start.Sub(t.start)))
	if s.Service != "" {
		fmt.Fprintf(&t.b, "  [%s %s]", s.Service, strings.ToLower(s.Kind))
	} else {
		fmt.Fprintf(&t.b, "  [%s]", strings.ToLower(s.Kind))
	}
	if s.Status == "Error" {
		t.b.WriteString("  ERROR")
	}
	t.b.WriteByte('\n')
	kids := t.children[s.SpanID]
	slices.SortStableFunc(kids, byStart)
	for i, k := range kids {
		t.draw(k, prefix+next, i == len(kids)-1, false)
	}
}

// fmtDur is a duration rounded for reading: µs below a millisecond.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
