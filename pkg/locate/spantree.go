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
	byID := make(map[string]bool, len(spans))
	start := spans[0].Start
	for _, s := range spans {
		byID[s.SpanID] = true
		if s.Start.Before(start) {
			start = s.Start
		}
	}
	// A root of a linked trace (the worker's batch span) is drawn under the
	// span that links to it, else under the span it links to.
	linkedFrom := map[string]string{}
	for _, s := range spans {
		for _, l := range s.Links {
			_, sid, _ := strings.Cut(l, "-")
			if byID[sid] {
				linkedFrom[sid] = s.SpanID
			}
		}
	}
	children := map[string][]telemetry.StoredSpan{}
	var roots []telemetry.StoredSpan
	for _, s := range spans {
		parent := ""
		switch {
		case s.ParentID != "" && byID[s.ParentID]:
			parent = s.ParentID
		case linkedFrom[s.SpanID] != "":
			parent = linkedFrom[s.SpanID]
		default:
			for _, l := range s.Links {
				if _, sid, _ := strings.Cut(l, "-"); byID[sid] {
					parent = sid
					break
				}
			}
		}
		if parent != "" && parent != s.SpanID {
			children[parent] = append(children[parent], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b telemetry.StoredSpan) int { return a.Start.Compare(b.Start) }
	slices.SortStableFunc(roots, byStart)
	var b strings.Builder
	seen := map[string]bool{}
	var draw func(s telemetry.StoredSpan, prefix string, last, root bool)
	draw = func(s telemetry.StoredSpan, prefix string, last, root bool) {
		if seen[s.SpanID] {
			return
		}
		seen[s.SpanID] = true
		branch, next := "", ""
		if !root {
			branch, next = "├─ ", "│  "
			if last {
				branch, next = "└─ ", "   "
			}
		}
		fmt.Fprintf(&b, "%s%s%s  %s  +%s", prefix, branch, s.Name, fmtDur(s.Duration()), fmtDur(s.Start.Sub(start)))
		if s.Service != "" {
			fmt.Fprintf(&b, "  [%s %s]", s.Service, strings.ToLower(s.Kind))
		} else {
			fmt.Fprintf(&b, "  [%s]", strings.ToLower(s.Kind))
		}
		if s.Status == "Error" {
			b.WriteString("  ERROR")
		}
		b.WriteByte('\n')
		kids := children[s.SpanID]
		slices.SortStableFunc(kids, byStart)
		for i, k := range kids {
			draw(k, prefix+next, i == len(kids)-1, false)
		}
	}
	for _, r := range roots {
		draw(r, "", true, true)
	}
	return b.String()
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
