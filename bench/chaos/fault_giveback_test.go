//go:build chaos

package chaos

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestStaleRefusals: the flood-giveback fault's rule. A refusal is stale
// when its request was sent over the bound after the unit came back and
// answered before any request that may have taken the unit was sent; a
// 202, a 5xx or no answer may have taken it, a refusal took nothing.
func TestStaleRefusals(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	soldOut := func(id string, sent, recv int) floodAnswer {
		return floodAnswer{requestID: id, sent: at(sent), recv: at(recv), status: 409, code: "SOLD_OUT"}
	}
	bound := time.Second
	for _, c := range []struct {
		name    string
		answers []floodAnswer
		want    []string
	}{
		{"refused within the bound", []floodAnswer{soldOut("a", 500, 510)}, nil},
		{"refused after the bound, nothing took it", []floodAnswer{soldOut("a", 1500, 1510), soldOut("b", 1600, 1700)}, []string{"a", "b"}},
		{"a 202 sent before the refusal was answered", []floodAnswer{
			{requestID: "x", sent: at(1505), recv: at(1520), status: 202}, soldOut("a", 1500, 1504), soldOut("b", 1501, 1530)}, []string{"a"}},
		{"a 503 may have taken it", []floodAnswer{
			{requestID: "x", sent: at(900), recv: at(1200), status: 503, code: "UNAVAILABLE"}, soldOut("a", 1500, 1510)}, nil},
		{"no answer may have taken it", []floodAnswer{{requestID: "x", sent: at(200), recv: at(2200)}, soldOut("a", 1500, 1510)}, nil},
		{"a 202 answered before the unit came back took another", []floodAnswer{
			{requestID: "x", sent: at(-300), recv: at(-200), status: 202}, soldOut("a", 1500, 1510)}, []string{"a"}},
		{"a request in flight when it came back may have taken it", []floodAnswer{
			{requestID: "x", sent: at(-300), recv: at(1700), status: 202}, soldOut("a", 1500, 1510)}, nil},
		{"another code", []floodAnswer{{requestID: "a", sent: at(1500), recv: at(1510), status: 409, code: "NOT_ON_SALE"}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, a := range staleRefusals(c.answers, "SOLD_OUT", t0, bound) {
				got = append(got, a.requestID)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("stale: got %v, want %v", got, c.want)
			}
		})
	}
}

// TestStretches: a stretch is Redis holding stock throughout: runs of reads
// above zero with no gap between them, from the end of the first read to
// the start of the last; a zero, a failed read or a gap ends one.
func TestStretches(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	read := func(ms int, n int64) stockSample { return stockSample{before: at(ms), after: at(ms + 1), n: n} }
	f := &flood{samples: []stockSample{
		read(0, 0), read(5, 1), read(10, 2), read(15, 1), read(20, 0), // 6–15
		read(25, 1), read(30, -1), // a single read: no stretch; a failed one ends it
		read(35, 1), read(40, 1), read(45, 1), read(100, 1), read(105, 1), // a gap at 46–100
	}}
	var got []string
	for _, s := range f.stretches(20 * time.Millisecond) {
		got = append(got, fmt.Sprintf("%d-%d", s.from.Sub(t0).Milliseconds(), s.to.Sub(t0).Milliseconds()))
	}
	if want := []string{"6-15", "36-45", "101-105"}; !slices.Equal(got, want) {
		t.Errorf("stretches %v, want %v", got, want)
	}
}
