package reconciler

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

// TestStaleFixerCannotWrite: a fixer whose lock expired and was taken by
// another is refused by Postgres before its fix script runs.
func TestStaleFixerCannotWrite(t *testing.T) {
	t.Parallel()
	db, r := testenv.MustDatabase(t), testenv.MustRedis(t)
	ctx := context.Background()
	orders, st := order.NewStore(db.Pool), stock.New(r.Client, r.Prefix)
	it := stock.Item{ActivityID: 3, ItemID: 4}
	a := order.Activity{ID: 3, Name: "fence", StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour), PerUserLimit: 1,
		Items: []order.ItemStock{{ItemID: 4, InitialStock: 10}}}
	if err := orders.UpsertActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: 10, StartsAt: a.StartsAt, EndsAt: a.EndsAt, Cap: 1}); err != nil {
		t.Fatal(err)
	}
	if err := orders.MarkPreheated(ctx, 3, 4); err != nil {
		t.Fatal(err)
	}
	lk := lock.New(r.Client, r.Prefix)
	rec := New(Config{Fix: true}, Deps{Orders: orders, Stock: st, Locker: lk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})

	stale, err := lk.TryAcquire(ctx, FixLockName, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	var cur *lock.Lock
	for cur == nil {
		if time.Now().After(deadline) {
			t.Fatal("the stale lock never expired")
		}
		time.Sleep(10 * time.Millisecond)
		cur, _ = lk.TryAcquire(ctx, FixLockName, time.Minute)
	}

	nudge := func() {
		t.Helper()
		stocktest.SetStock(t, stocktest.On(r.Client, r.Prefix), it, 15)
	}
	nudge()
	rep, err := rec.pass(ctx, []stock.Item{it}, cur)
	if err != nil || len(rep.Items) != 1 || rep.Items[0].Error != "" || rep.Items[0].Drift != 5 {
		t.Fatalf("current holder's fix: %+v %v", rep, err)
	}
	if got := r.Client.Get(ctx, stocktest.KeysOf(stocktest.On(r.Client, r.Prefix), it).Stock).Val(); got != "10" {
		t.Fatalf("stock after the current holder's fix %s, want 10", got)
	}

	nudge()
	rep, err = rec.pass(ctx, []stock.Item{it}, stale)
	if err != nil || len(rep.Items) != 1 || !strings.Contains(rep.Items[0].Error, lock.ErrStaleFence.Error()) {
		t.Fatalf("stale holder's fix: %+v %v; want a stale fence error", rep, err)
	}
	if got := r.Client.Get(ctx, stocktest.KeysOf(stocktest.On(r.Client, r.Prefix), it).Stock).Val(); got != "15" {
		t.Errorf("stale holder changed the stock to %s", got)
	}
}
