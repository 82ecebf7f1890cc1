package reconciler_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
	"orderpipe/reconciler"
)

// TestMarkersOfAnIncompleteIndex: an item whose marker index does not vouch
// for every marker (markers an older binary set, or an index Redis lost) is
// read by a keyspace scan, so a marker outside the index is still found as
// extra; the fix removes it and completes the index, and the next pass reads
// the index alone.
func TestMarkersOfAnIncompleteIndex(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	ctx := context.Background()
	e.ack(t, e.decide(t, e.reserve(t, e.it, "a", 1, 1))...)
	// As an older binary leaves the item: markers, and no index.
	stocktest.DropMarkerIndex(t, e.sr, e.it)
	stocktest.SetMarker(t, e.sr, e.it, 99, "nobody")
	r := e.check(t, e.it)
	if !slices.Equal(r.ExtraMarkers, []int64{99}) || len(r.MissingMarkers)+len(r.WrongMarkers) != 0 || r.MarkerIndex != "incomplete" {
		t.Fatalf("incomplete index: extra %v missing %v wrong %v index %q; want extra [99], incomplete",
			r.ExtraMarkers, r.MissingMarkers, r.WrongMarkers, r.MarkerIndex)
	}
	res, err := e.fixer.RunOnce(ctx)
	if err != nil || res.ExitCode() != reconciler.ExitClean {
		t.Fatalf("fix: exit %d, %v", res.ExitCode(), err)
	}
	var out strings.Builder
	if err := res.WriteText(&out); err != nil || !strings.Contains(out.String(), "activity 7 item 1: marker index incomplete") {
		t.Errorf("the fix's report does not say the index was incomplete (%v):\n%s", err, out.String())
	}
	if stocktest.MarkerOwner(t, e.sr, e.it, 99) != "" {
		t.Error("extra marker survived the fix")
	}
	users, complete, err := e.st.Markers(ctx, e.it)
	if err != nil || !complete || !slices.Equal(users, []int64{1}) {
		t.Errorf("index after the fix: %v complete %v (%v); want [1] complete", users, complete, err)
	}
	if ttl := stocktest.MarkerIndexTTL(t, e.sr, e.it); ttl <= time.Hour {
		t.Errorf("index TTL after the fix %s; want the sale end + a day", ttl)
	}
	if r := e.check(t, e.it); r.Drifted() || r.MarkerIndex != "ok" {
		t.Errorf("after the fix: %+v", r)
	}

	// A stale member (its marker gone outside the scripts) is no drift, and
	// a fix drops it.
	stocktest.AddToMarkerIndex(t, e.sr, e.it, 42)
	stocktest.SetStock(t, e.sr, e.it, 3) // some drift, so the fix runs
	if r := e.check(t, e.it); len(r.MissingMarkers)+len(r.ExtraMarkers)+len(r.WrongMarkers) != 0 {
		t.Errorf("a stale member reported as marker drift: %+v", r)
	}
	if res, err := e.fixer.RunOnce(ctx); err != nil || res.ExitCode() != reconciler.ExitClean {
		t.Fatalf("second fix: exit %d, %v", res.ExitCode(), err)
	}
	if users, _, _ := e.st.Markers(ctx, e.it); !slices.Equal(users, []int64{1}) {
		t.Errorf("index after the second fix: %v; want [1]", users)
	}
}

// TestPassReadsOnlyTheItemsMarkers: with 50k unrelated keys beside the sale
// (dedup records, other sales' markers: what earlier sales leave), a pass
// reads each item's marker index and never scans the keyspace, and still
// finds a missing marker.
func TestPassReadsOnlyTheItemsMarkers(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, 10)
	users := make([][]int64, 7) // other sales' items 9:0 … 9:6
	for i := range 50000 {
		users[i%7] = append(users[i%7], int64(i))
	}
	for item, us := range users {
		stocktest.SetMarkers(t, e.sr, stock.Item{ActivityID: 9, ItemID: int64(item)}, "old", us...)
	}
	e.ack(t, e.decide(t, e.reserve(t, e.it, "a", 1, 1), e.reserve(t, e.it, "b", 2, 1))...)
	stocktest.DropMarker(t, e.sr, e.it, 2)

	cc := testenv.CountCommands(e.rdb.Client)
	r := e.check(t, e.it)
	if !slices.Equal(r.MissingMarkers, []int64{2}) || len(r.ExtraMarkers)+len(r.WrongMarkers) != 0 || r.MarkerIndex != "ok" {
		t.Errorf("report %+v; want missing [2], index ok", r)
	}
	n := cc.Counts()
	if n["scan"] != 0 {
		t.Errorf("the pass sent %d SCANs; want none (commands %v)", n["scan"], n)
	}
	// One SSCAN per item (two items, each index smaller than a page).
	if n["sscan"] != 2 {
		t.Errorf("the pass sent %d SSCANs; want 2 (commands %v)", n["sscan"], n)
	}
}

// TestBucketMarkerIndexes: a bucketed item has an index per bucket; one that
// is incomplete is read by a scan (an extra marker outside it is found) and
// the fix completes it, drift or not.
func TestBucketMarkerIndexes(t *testing.T) {
	t.Parallel()
	e := mustBucketEnv(t, 12, 3)
	ctx := context.Background()
	var user int64 = 1
	for stock.BucketOf(user, e.B) != 1 {
		user++
	}
	b1 := e.it.ForUser(user, e.B)
	b2 := e.it
	b2.Bucket = 2
	stocktest.DropMarkerIndex(t, e.sr, b1)
	stocktest.DropMarkerIndex(t, e.sr, b2)
	stocktest.SetMarker(t, e.sr, b1, user, "nobody")
	res, err := e.fixer.RunOnce(ctx)
	if err != nil || res.ExitCode() != reconciler.ExitClean || len(res.Found.Items) != 1 {
		t.Fatalf("fix: exit %d, %v, %+v", res.ExitCode(), err, res)
	}
	if f := res.Found.Items[0]; !slices.Equal(f.ExtraMarkers, []int64{user}) || f.MarkerIndex != "incomplete" {
		t.Errorf("found %+v; want extra [%d], index incomplete", f, user)
	}
	if a := res.After.Items[0]; a.MarkerIndex != "ok" || a.Drifted() {
		t.Errorf("after the fix %+v; want clean, index ok", a)
	}
	for b := range e.B {
		it := e.it
		it.Bucket = b
		if users, complete, err := e.st.Markers(ctx, it); err != nil || !complete || len(users) != 0 {
			t.Errorf("bucket %d after the fix: %v complete %v (%v); want [] complete", b, users, complete, err)
		}
	}
	if stocktest.MarkerOwner(t, e.sr, b1, user) != "" {
		t.Error("extra marker survived the fix")
	}
	// No drift, only an incomplete index: the fix completes it all the same.
	stocktest.DropMarkerIndex(t, e.sr, b2)
	if res, err := e.fixer.RunOnce(ctx); err != nil || res.ExitCode() != reconciler.ExitClean || res.After == nil {
		t.Fatalf("second fix: exit %d, %v, %+v", res.ExitCode(), err, res)
	}
	if _, complete, err := e.st.Markers(ctx, b2); err != nil || !complete {
		t.Errorf("bucket 2 after a fix without drift: complete %v (%v); want complete", complete, err)
	}
}
