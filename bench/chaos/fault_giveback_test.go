//go:build chaos

package chaos

import (
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
