package stock_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"orderpipe/pkg/stock"
)

// TestReads: what redrive, the reconciler, locate and the bench audit read
// of a reservation through the store, before and after it is given back.
func TestReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 5, 2)
	other := stock.Item{ActivityID: 1, ItemID: 3}
	if res := f.reserve(t, "r1", "1-2-o1", 7, 2, "fp1"); res.Outcome != stock.Reserved {
		t.Fatalf("reserve: %v", res.Outcome)
	}

	if ids, err := f.s.JournalIDs(ctx, f.item); err != nil || !slices.Equal(ids, []string{"r1"}) {
		t.Errorf("JournalIDs = %v, %v", ids, err)
	}
	if j, err := f.s.Journal(ctx, f.item); err != nil || !slices.Equal(slices.Collect(maps.Keys(j)), []string{"r1"}) || j["r1"] == "" {
		t.Errorf("Journal = %v, %v", j, err)
	}
	if n, err := f.s.JournalLen(ctx, f.item, other); err != nil || n != 1 {
		t.Errorf("JournalLen = %d, %v; want 1", n, err)
	}
	if owner, err := f.s.MarkerOwner(ctx, f.item, 7); err != nil || owner != "r1" {
		t.Errorf("MarkerOwner = %q, %v; want r1", owner, err)
	}
	if m, err := f.s.MarkerOwners(ctx, f.item, []int64{7, 8}); err != nil || len(m) != 1 || m[7] != "r1" {
		t.Errorf("MarkerOwners = %v, %v; want 7 → r1", m, err)
	}
	tr, err := f.s.Traces(ctx, []stock.Item{f.item, other}, "r1")
	if err != nil || len(tr) != 2 {
		t.Fatalf("Traces = %+v, %v", tr, err)
	}
	if d := tr[0].Dedup; d == nil || d.OrderNo != "1-2-o1" || d.Remaining != "3" || d.Event == "" || !tr[0].Journaled ||
		tr[0].Journal != d.Event {
		t.Errorf("Traces on the item = %+v (dedup %+v)", tr[0], d)
	}
	if tr[1].Dedup != nil || tr[1].Journaled || tr[1].Item != other {
		t.Errorf("Traces on another item = %+v", tr[1])
	}
	if fate, err := f.s.Fate(ctx, f.item, "1-2-o1"); err != nil || fate != "" {
		t.Errorf("Fate before a release = %q, %v", fate, err)
	}

	rel := stock.Release{Item: f.item, Ref: stock.Ref{RequestID: "r1", OrderNo: "1-2-o1"}, UserID: 7, Quantity: 2}
	if out, err := f.s.Release(ctx, stock.Compensation, rel); err != nil || out != stock.Released {
		t.Fatalf("compensate: %v %v", out, err)
	}
	if fate, err := f.s.Fate(ctx, f.item, "1-2-o1"); err != nil || fate != "released:1-2-o1" {
		t.Errorf("Fate after the release = %q, %v", fate, err)
	}
	if n, err := f.s.JournalLen(ctx, f.item); err != nil || n != 0 {
		t.Errorf("JournalLen after the release = %d, %v", n, err)
	}
	if owner, err := f.s.MarkerOwner(ctx, f.item, 7); err != nil || owner != "" {
		t.Errorf("MarkerOwner after the release = %q, %v", owner, err)
	}
	if err := f.s.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

// TestJournalPages: a journal longer than a page comes in several pages
// that together hold every entry, and fn's error ends the scan with it.
func TestJournalPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 1200
	f := mustFixture(t, n, 1)
	for i := range n {
		rid := fmt.Sprintf("r%d", i)
		if res := f.reserve(t, rid, "1-2-"+rid, int64(i+1), 1, "fp"); res.Outcome != stock.Reserved {
			t.Fatalf("reserve %s: %v", rid, res.Outcome)
		}
	}
	got := map[string]string{}
	pages := 0
	err := f.s.JournalPages(ctx, f.item, func(page map[string]string) error {
		pages++
		maps.Copy(got, page)
		return nil
	})
	if err != nil || len(got) != n || pages < 2 {
		t.Fatalf("JournalPages: %d entries in %d pages, %v; want %d entries in more than one page", len(got), pages, err, n)
	}
	whole, err := f.s.Journal(ctx, f.item)
	if err != nil || !maps.Equal(whole, got) {
		t.Errorf("Journal holds %d entries (%v), the pages %d", len(whole), err, len(got))
	}
	stop := errors.New("stop")
	pages = 0
	err = f.s.JournalPages(ctx, f.item, func(map[string]string) error { pages++; return stop })
	if !errors.Is(err, stop) || pages != 1 {
		t.Errorf("JournalPages with fn failing: %d pages, %v; want 1 page and fn's error", pages, err)
	}
}

// TestSaleWindow reads back the window a preheat wrote, to the millisecond,
// and the one the kill switch left; an item without a sale has none.
func TestSaleWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := mustStore(t)
	it := stock.Item{ActivityID: 4, ItemID: 2}
	starts, ends := time.UnixMilli(1_800_000_000_123).UTC(), time.UnixMilli(1_800_003_600_456).UTC()
	if _, err := s.Preheat(ctx, stock.Sale{Item: it, Stock: 5, StartsAt: starts.Add(789 * time.Microsecond), EndsAt: ends, Cap: 1}); err != nil {
		t.Fatal(err)
	}
	if a, b, ok, err := s.SaleWindow(ctx, it); err != nil || !ok || !a.Equal(starts) || !b.Equal(ends) {
		t.Errorf("SaleWindow = %v %v %v %v, want %v %v true", a, b, ok, err, starts, ends)
	}
	at := starts.Add(time.Minute)
	if _, _, err := s.End(ctx, []stock.Sale{{Item: it}}, at); err != nil {
		t.Fatal(err)
	}
	if _, b, ok, err := s.SaleWindow(ctx, it); err != nil || !ok || b.After(at) {
		t.Errorf("SaleWindow after the end: ends %v ok %v %v, want at most %v", b, ok, err, at)
	}
	if _, _, ok, err := s.SaleWindow(ctx, stock.Item{ActivityID: 4, ItemID: 3}); err != nil || ok {
		t.Errorf("SaleWindow of an item without a sale: ok %v %v, want false", ok, err)
	}
}
