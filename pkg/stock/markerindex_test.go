package stock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"orderpipe/pkg/stock"
)

// TestMarkerIndexFollowsTheMarkers: every script that sets or deletes a
// limit marker adds or removes its user in the item's marker index in the
// same call, and a fresh preheat starts the index as complete.
func TestMarkerIndexFollowsTheMarkers(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10, 1)
	ctx := context.Background()
	c := f.r.Client
	want := func(step string, users ...int64) {
		t.Helper()
		got, complete, err := f.s.Markers(ctx, f.item)
		if err != nil {
			t.Fatal(err)
		}
		if !complete || !slices.Equal(got, users) {
			t.Errorf("%s: index %v complete %v; want %v complete", step, got, complete, users)
		}
		for _, u := range users {
			if c.Exists(ctx, f.keys.Limit(u)).Val() != 1 {
				t.Errorf("%s: user %d indexed without a marker", step, u)
			}
		}
	}
	want("after the preheat")
	if ttl := c.TTL(ctx, f.keys.MarkerIndex()).Val(); ttl <= time.Hour {
		t.Errorf("index TTL %s; want the sale end + a day", ttl)
	}
	for i, u := range []int64{1, 2, 3, 4} {
		rid, ono := "r"+string(rune('a'+i)), "o"+string(rune('a'+i))
		if r := f.reserve(t, rid, ono, u, 1, "fp"+rid); r.Outcome != stock.Reserved {
			t.Fatalf("reserve of user %d: %s", u, r.Outcome)
		}
	}
	// Refused: no marker, no member.
	if r := f.reserve(t, "rz", "oz", 1, 1, "fprz"); r.Outcome != stock.AlreadyPurchased {
		t.Fatalf("second reserve of user 1: %s", r.Outcome)
	}
	want("after four reserves", 1, 2, 3, 4)

	f.mustRelease(t, "abort", stock.Unproduced, f.release("ra", "oa", 1), stock.Released)
	want("after an abort", 2, 3, 4)
	f.mustRelease(t, "compensate", stock.Compensation, f.release("rb", "ob", 2), stock.Released)
	want("after a compensation", 3, 4)
	// The marker is handed to the user's live order: it stays, so does the member.
	handed := f.release("rc", "oc", 3)
	handed.LimitOwner = "r-live"
	f.mustRelease(t, "compensate with an owner", stock.Compensation, handed, stock.Released)
	want("after a hand-over", 3, 4)
	// A release of a reservation that no longer holds the marker leaves both.
	f.mustRelease(t, "compensate of a stale reservation", stock.Compensation, f.release("r-old", "o-old", 4), stock.Released)
	want("after a release of another request", 3, 4)
}

// TestMarkerIndexOfAnOlderSale: a preheat whose stock key exists (a running
// sale, perhaps preheated by a binary that kept no index) does not vouch for
// an index it did not start; a bucketed preheat starts one per bucket.
func TestMarkerIndexOfAnOlderSale(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 10, 1)
	ctx := context.Background()
	c := f.r.Client
	if err := c.Del(ctx, f.keys.MarkerIndex()).Err(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sale := stock.Sale{Item: f.item, Stock: 10, StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Cap: 1}
	if loaded, err := f.s.Preheat(ctx, sale); err != nil || loaded {
		t.Fatalf("repeated preheat: loaded %v, %v", loaded, err)
	}
	if r := f.reserve(t, "r1", "o1", 7, 1, "fp1"); r.Outcome != stock.Reserved {
		t.Fatal(r.Outcome)
	}
	if users, complete, err := f.s.Markers(ctx, f.item); err != nil || complete || !slices.Equal(users, []int64{7}) {
		t.Errorf("index of a sale preheated before: %v complete %v (%v); want [7], incomplete", users, complete, err)
	}

	bucketed := stock.Sale{Item: stock.Item{ActivityID: 5, ItemID: 6}, Stock: 8, StartsAt: sale.StartsAt, EndsAt: sale.EndsAt, Cap: 1, Buckets: 3}
	if _, err := f.s.Preheat(ctx, bucketed); err != nil {
		t.Fatal(err)
	}
	for b := range 3 {
		it := bucketed.Item
		it.Bucket = b
		if _, complete, err := f.s.Markers(ctx, it); err != nil || !complete {
			t.Errorf("bucket %d: index complete %v (%v); want complete", b, complete, err)
		}
	}
}
