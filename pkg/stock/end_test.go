package stock_test

import (
	"context"
	"testing"
	"time"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
)

// TestArmNeverArmsPastTheKillSwitch: an arm that reaches Redis after the
// kill switch's end — a preheat's pipeline sent with the window it read
// before the end — arms no later than the end, on an item that was on sale
// when it ended and on one that had no sale hash yet (the end leaves a
// tombstone there, with an expiry): reserves stay NOT_ON_SALE.
func TestArmNeverArmsPastTheKillSwitch(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 5, 1)
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	fresh := stock.Item{ActivityID: 1, ItemID: 7}
	open := func(it stock.Item) stock.Sale {
		return stock.Sale{Item: it, Stock: 5, StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Cap: 1}
	}
	if _, err := f.s.Load(ctx, open(fresh)); err != nil {
		t.Fatal(err)
	}
	at := now.Add(-time.Second)
	ends, ok, err := f.s.End(ctx, []stock.Sale{{Item: f.item}, {Item: fresh}}, at)
	if err != nil || !ok || !ends.Equal(at) {
		t.Fatalf("End: %v %v %v, want %v (the armed item's end)", ends, ok, err, at)
	}
	if ttl := f.r.Client.TTL(ctx, stocktest.KeysOf(f.sr, fresh).Sale).Val(); ttl <= 0 || ttl > time.Hour+time.Minute {
		t.Errorf("the tombstone of the item never armed lives %v, want about %v", ttl, stock.StockGrace)
	}
	if err := f.s.ArmAll(ctx, []stock.Sale{open(f.item), open(fresh)}); err != nil {
		t.Fatal(err)
	}
	for i, it := range []stock.Item{f.item, fresh} {
		from, to, ok, err := f.s.SaleWindow(ctx, it)
		if err != nil || !ok || to.After(at) || !from.Before(to) {
			t.Errorf("item %d: window after a late arm %v – %v (%v %v), want one that ends by %v", it.ItemID, from, to, ok, err, at)
		}
		res, err := f.s.Reserve(ctx, stock.Reservation{Item: it, RequestID: "late-" + string(rune('a'+i)), OrderNo: "o" + string(rune('a'+i)),
			UserID: 9, Quantity: 1, Fingerprint: "f", Event: []byte(`{}`)})
		if err != nil || res.Outcome != stock.NotOnSale {
			t.Errorf("item %d: reserve after a late arm: %+v %v, want NOT_ON_SALE", it.ItemID, res, err)
		}
	}
	// A repeated end answers the first end, never a later one.
	if again, ok, err := f.s.End(ctx, []stock.Sale{{Item: f.item}, {Item: fresh}}, now); err != nil || !ok || !again.Equal(at) {
		t.Errorf("a repeated end: %v %v %v, want %v", again, ok, err, at)
	}
}
