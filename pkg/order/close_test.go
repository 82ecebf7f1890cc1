package order_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/order"
	"orderpipe/pkg/testenv"
)

// mustStore is a store on a fresh database with activity 1, item 10 (stock 100).
func mustStore(tb testing.TB) *order.Store {
	tb.Helper()
	db := testenv.MustDatabase(tb)
	s := order.NewStore(db.Pool)
	err := s.UpsertActivity(context.Background(), order.Activity{ID: 1, Name: "sale", StartsAt: time.Now().Add(-time.Hour),
		EndsAt: time.Now().Add(time.Hour), PerUserLimit: 5, Items: []order.ItemStock{{ItemID: 10, InitialStock: 100}}})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// mustOrder persists an UNPAID order of user for item 1:10.
func mustOrder(tb testing.TB, s *order.Store, user int64, qty int) string {
	tb.Helper()
	no := fmt.Sprintf("1-10-u%d", user)
	ds, err := s.DecideBatch(context.Background(), []order.Request{{RequestID: fmt.Sprintf("r-%d", user), OrderNo: no,
		UserID: user, ActivityID: 1, ItemID: 10, Quantity: qty, ReservedAt: time.Now(), Held: true}})
	if err != nil {
		tb.Fatal(err)
	}
	if ds[0].Outcome != order.Created {
		tb.Fatalf("order of user %d: %s %s", user, ds[0].Outcome, ds[0].Reason)
	}
	return no
}

func age(tb testing.TB, s *order.Store, by time.Duration, orderNos ...string) {
	tb.Helper()
	mustExec(tb, s, `UPDATE orders SET created_at = created_at - $2::interval, reserved_at = reserved_at - $2::interval
		WHERE order_no = ANY($1)`, orderNos, by)
}

// mustExec runs sql on the store's database: rows a test sets up by hand.
func mustExec(tb testing.TB, s *order.Store, sql string, args ...any) {
	tb.Helper()
	if _, err := s.Pool().Exec(context.Background(), sql, args...); err != nil {
		tb.Fatal(err)
	}
}

// mustPaidOrder persists an order of user for item 1:10 and pays it.
func mustPaidOrder(tb testing.TB, s *order.Store, user int64, qty int) string {
	tb.Helper()
	no := mustOrder(tb, s, user, qty)
	if _, err := s.Pay(context.Background(), no); err != nil {
		tb.Fatal(err)
	}
	return no
}

func stockOf(tb testing.TB, s *order.Store) order.ItemStock {
	tb.Helper()
	it, err := s.ItemStockOf(context.Background(), 1, 10)
	if err != nil {
		tb.Fatal(err)
	}
	return it
}

func TestPay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)

	t.Run("UnpaidBecomesPaid", func(t *testing.T) {
		no := mustOrder(t, s, 1, 2)
		o, err := s.Pay(ctx, no)
		if err != nil || o.Status != order.StatusPaid || o.PaidAt == nil || o.ClosedAt != nil {
			t.Fatalf("pay: %+v %v", o, err)
		}
		again, err := s.Pay(ctx, no)
		if err != nil || again.Status != order.StatusPaid || !again.PaidAt.Equal(*o.PaidAt) {
			t.Fatalf("second pay is not idempotent: %+v %v", again, err)
		}
	})
	t.Run("ClosedIsRefused", func(t *testing.T) {
		no := mustOrder(t, s, 2, 1)
		age(t, s, time.Hour, no)
		if _, err := s.CloseExpired(ctx, time.Minute, 10); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pay(ctx, no); !errors.Is(err, order.ErrOrderClosed) {
			t.Fatalf("pay of a closed order: %v, want ErrOrderClosed", err)
		}
		o, err := s.GetOrder(ctx, no)
		if err != nil || o.Status != order.StatusClosed || o.PaidAt != nil {
			t.Fatalf("closed order changed: %+v %v", o, err)
		}
	})
	t.Run("RejectedIsRefused", func(t *testing.T) {
		mustOrder(t, s, 3, 1)
		// Same user again: the one-live-order index rejects it.
		ds, err := s.DecideBatch(ctx, []order.Request{{RequestID: "r-3b", OrderNo: "1-10-u3b", UserID: 3, ActivityID: 1,
			ItemID: 10, Quantity: 1, ReservedAt: time.Now(), Held: true}})
		if err != nil || ds[0].Outcome != order.Rejected {
			t.Fatalf("setup: %+v %v", ds, err)
		}
		if _, err := s.Pay(ctx, "1-10-u3b"); !errors.Is(err, order.ErrOrderRejected) {
			t.Fatalf("pay of a rejected request: %v, want ErrOrderRejected", err)
		}
	})
	t.Run("UnknownIsNotFound", func(t *testing.T) {
		if _, err := s.Pay(ctx, "1-10-nope"); !errors.Is(err, order.ErrNotFound) {
			t.Fatalf("pay of an unknown order: %v, want ErrNotFound", err)
		}
	})
}

func TestCloseExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	before := stockOf(t, s)
	oldUnpaid := mustOrder(t, s, 1, 3)
	oldPaid := mustOrder(t, s, 2, 4)
	fresh := mustOrder(t, s, 3, 5)
	if _, err := s.Pay(ctx, oldPaid); err != nil {
		t.Fatal(err)
	}
	age(t, s, time.Hour, oldUnpaid, oldPaid)
	mid := stockOf(t, s)

	comps, err := s.CloseExpired(ctx, 30*time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 1 || comps[0].OrderNo != oldUnpaid || comps[0].Reason != order.ReasonClosedUnpaid ||
		comps[0].Quantity != 3 || comps[0].UserID != 1 || comps[0].RequestID != "r-1" || comps[0].LimitOwner != "" {
		t.Fatalf("compensations: %+v, want one CLOSED_UNPAID for %s", comps, oldUnpaid)
	}
	after := stockOf(t, s)
	if after.Stock != mid.Stock+3 || after.Version != mid.Version+1 {
		t.Errorf("stock %d v%d, want %d v%d", after.Stock, after.Version, mid.Stock+3, mid.Version+1)
	}
	if after.InitialStock != before.InitialStock || after.Stock != after.InitialStock-4-5 {
		t.Errorf("I1: initial %d, stock %d, live 9", after.InitialStock, after.Stock)
	}
	for no, want := range map[string]string{oldUnpaid: order.StatusClosed, oldPaid: order.StatusPaid, fresh: order.StatusUnpaid} {
		if o, err := s.GetOrder(ctx, no); err != nil || o.Status != want {
			t.Errorf("%s: %s %v, want %s", no, o.Status, err, want)
		}
	}
	// Nothing left to close: a second run is a no-op.
	if comps, err := s.CloseExpired(ctx, 30*time.Minute, 10); err != nil || len(comps) != 0 {
		t.Fatalf("second run: %+v %v", comps, err)
	}
	if again := stockOf(t, s); again.Stock != after.Stock {
		t.Errorf("second run moved stock: %d → %d", after.Stock, again.Stock)
	}
}

func TestDueCompensationsBackOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	no := mustOrder(t, s, 1, 1)
	age(t, s, time.Hour, no)
	comps, err := s.CloseExpired(ctx, time.Minute, 10)
	if err != nil || len(comps) != 1 {
		t.Fatalf("closing: %+v %v", comps, err)
	}
	id := comps[0].ID
	due := func(base, maxDelay time.Duration) bool {
		t.Helper()
		cs, err := s.DueCompensations(ctx, order.ReasonClosedUnpaid, base, maxDelay, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(cs) == 1 && cs[0].ID == id
	}
	mustExec(t, s, `UPDATE redis_compensations SET created_at = now() - interval '10 seconds' WHERE id = $1`, id)
	if !due(time.Second, time.Minute) {
		t.Error("fresh failure-free row 10s old is not due with base 1s")
	}
	if due(time.Minute, time.Hour) {
		t.Error("row 10s old is due with base 1m")
	}
	for range 3 { // three failed attempts: due at 8·base
		if err := s.MarkCompensationFailed(ctx, id, errors.New("redis down")); err != nil {
			t.Fatal(err)
		}
	}
	if due(2*time.Second, time.Hour) {
		t.Error("row tried 3 times is due after 10s with base 2s (want 16s)")
	}
	if !due(time.Second, time.Hour) {
		t.Error("row tried 3 times is not due after 10s with base 1s (want 8s)")
	}
	if !due(2*time.Second, 5*time.Second) {
		t.Error("backoff is not capped by maxDelay")
	}
	if cs, err := s.DueCompensations(ctx, order.ReasonDBStockMismatch, time.Millisecond, time.Millisecond, 10); err != nil || len(cs) != 0 {
		t.Errorf("other reason listed the row: %+v %v", cs, err)
	}
	if err := s.MarkCompensationApplied(ctx, id); err != nil {
		t.Fatal(err)
	}
	if due(time.Millisecond, time.Millisecond) {
		t.Error("applied row is still due")
	}
}

// TestI6IsATableRule: Postgres itself refuses an order both paid and closed,
// or a status that disagrees with its times.
func TestI6IsATableRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	no := mustOrder(t, s, 1, 1)
	for _, q := range []string{
		`UPDATE orders SET status = 'PAID' WHERE order_no = $1`,
		`UPDATE orders SET status = 'PAID', paid_at = now(), closed_at = now() WHERE order_no = $1`,
		`UPDATE orders SET closed_at = now() WHERE order_no = $1`,
	} {
		if _, err := s.Pool().Exec(ctx, q, no); err == nil {
			t.Errorf("Postgres accepted %s", q)
		}
	}
}

// TestUpsertAfterSalesMovesStockByTheChange is I1 across an admin edit: the
// units sold stay sold, and stock below them is refused without a change.
func TestUpsertAfterSalesMovesStockByTheChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	mustOrder(t, s, 1, 3)
	a := order.Activity{ID: 1, Name: "sale", StartsAt: time.Now().Add(-time.Hour), EndsAt: time.Now().Add(time.Hour), PerUserLimit: 5,
		Items: []order.ItemStock{{ItemID: 10, InitialStock: 120}}}
	if err := s.UpsertActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	if it := stockOf(t, s); it.InitialStock != 120 || it.Stock != 117 {
		t.Fatalf("after raising to 120 with 3 sold: initial %d stock %d, want 120 and 117", it.InitialStock, it.Stock)
	}
	a.Items[0].InitialStock = 2
	if err := s.UpsertActivity(ctx, a); !errors.Is(err, order.ErrStockBelowSold) {
		t.Fatalf("stock 2 below 3 sold: %v, want ErrStockBelowSold", err)
	}
	if it := stockOf(t, s); it.InitialStock != 120 || it.Stock != 117 {
		t.Fatalf("a refused edit changed the item: initial %d stock %d", it.InitialStock, it.Stock)
	}
}

// TestPaidOrderIsLive is I2 after payment: a PAID order still blocks the
// user's second order of the item.
func TestPaidOrderIsLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	mustPaidOrder(t, s, 1, 1)
	ds, err := s.DecideBatch(ctx, []order.Request{{RequestID: "second", OrderNo: "1-10-second", UserID: 1, ActivityID: 1, ItemID: 10,
		Quantity: 1, ReservedAt: time.Now(), Held: true}})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Outcome != order.Rejected || ds[0].Reason != order.ReasonDuplicateLiveOrder {
		t.Fatalf("second order of a user holding a PAID one: %s %s, want REJECTED %s", ds[0].Outcome, ds[0].Reason, order.ReasonDuplicateLiveOrder)
	}
}

// TestBackstopsAreTableRules: the table refuses negative stock (I1) and a
// second order of one requestId (I3) whatever the code does.
func TestBackstopsAreTableRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	mustOrder(t, s, 1, 1)
	for _, c := range []struct{ sql, rule string }{
		{`UPDATE item_stock SET stock = -1 WHERE activity_id = 1 AND item_id = 10`, "item_stock_stock_check"},
		{`INSERT INTO orders (order_no, request_id, user_id, activity_id, item_id, quantity, status, reserved_at)
			VALUES ('1-10-dup', 'r-1', 2, 1, 10, 1, 'UNPAID', now())`, "orders_request_id_key"},
	} {
		if _, err := s.Pool().Exec(ctx, c.sql); err == nil || !strings.Contains(err.Error(), c.rule) {
			t.Errorf("%s: %v, want a violation of %s", c.sql, err, c.rule)
		}
	}
}

// TestPayWhileTheWorkerInserts: a client pays an order while the worker
// inserts it. The pay either finds nothing yet (ErrNotFound: the gateway
// answers ORDER_PENDING) or pays it — never an error for an order that
// turned up UNPAID between its update and its read.
func TestPayWhileTheWorkerInserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	for i := range 60 {
		r := req(fmt.Sprintf("race%d", i), int64(1000+i), 1)
		done := make(chan error, 1)
		go func() {
			for {
				o, err := s.Pay(ctx, r.OrderNo)
				if errors.Is(err, order.ErrNotFound) {
					continue
				}
				if err == nil && o.Status != order.StatusPaid {
					err = fmt.Errorf("paid order is %s", o.Status)
				}
				done <- err
				return
			}
		}()
		if _, err := s.DecideBatch(ctx, []order.Request{r}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("paying %s while it is inserted: %v", r.OrderNo, err)
		}
	}
}

// TestUpsertRemovesOnlyItemsNeverPreheated: an update that leaves an item
// out removes it while no preheat of it began; once one began, the update
// is refused with ErrItemPreheated and changes nothing, not even the items
// it lists.
func TestUpsertRemovesOnlyItemsNeverPreheated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	a := order.Activity{ID: 7, Name: "sale", StartsAt: time.Now().Add(-time.Hour), EndsAt: time.Now().Add(time.Hour), PerUserLimit: 1,
		Items: []order.ItemStock{{ItemID: 1, InitialStock: 10}, {ItemID: 2, InitialStock: 20}, {ItemID: 3, InitialStock: 30}}}
	if err := s.UpsertActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	a.Items = a.Items[:2]
	if err := s.UpsertActivity(ctx, a); err != nil {
		t.Fatalf("leaving out item 3, never preheated: %v", err)
	}
	if got := itemIDs(t, s, 7); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("items after leaving out item 3: %v, want [1 2]", got)
	}
	if _, err := s.BeginPreheat(ctx, 7); err != nil {
		t.Fatal(err)
	}
	a.Items = []order.ItemStock{{ItemID: 1, InitialStock: 11}, {ItemID: 4, InitialStock: 40}}
	if err := s.UpsertActivity(ctx, a); !errors.Is(err, order.ErrItemPreheated) {
		t.Fatalf("leaving out item 2 after a preheat began: %v, want ErrItemPreheated", err)
	}
	got, err := s.GetActivity(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Items) != 2 || got.Items[0].ItemID != 1 || got.Items[0].InitialStock != 10 || got.Items[1].ItemID != 2 {
		t.Fatalf("a refused update changed the items: %+v", got.Items)
	}
}

func itemIDs(t *testing.T, s *order.Store, activityID int64) []int64 {
	t.Helper()
	a, err := s.GetActivity(context.Background(), activityID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, it := range a.Items {
		ids = append(ids, it.ItemID)
	}
	return ids
}
