package order_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"orderpipe/pkg/order"
)

func req(rid string, user int64, q int) order.Request {
	return order.Request{RequestID: rid, OrderNo: "1-10-" + rid, UserID: user, ActivityID: 1, ItemID: 10, Quantity: q,
		ReservedAt: time.Now(), Held: true}
}

func TestDecideBatchLikeOneByOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	// Leave 5 units: the batch below asks for 2+2+3+1+1 from distinct users,
	// a second order of user 1, a copy of a request and a foreign reuse.
	mustExec(t, s, `UPDATE item_stock SET stock = 5, initial_stock = 5`)
	foreign := req("a", 9, 1)
	foreign.OrderNo, foreign.ItemID = "1-11-other", 11
	batch := []order.Request{req("a", 1, 2), req("b", 2, 2), req("c", 3, 3), req("d", 1, 1), req("a", 1, 2), req("e", 4, 1), foreign}
	ds, err := s.DecideBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		outcome order.Outcome
		reason  string
	}{
		{order.Created, ""},
		{order.Created, ""},
		{order.Rejected, order.ReasonDBStockMismatch}, // 3 > 1 left
		{order.Rejected, order.ReasonDuplicateLiveOrder},
		{order.Duplicate, ""},
		{order.Created, ""}, // the 1 left fits
		{order.Foreign, order.ReasonKeyReused},
	}
	for i, w := range want {
		if ds[i].Outcome != w.outcome || ds[i].Reason != w.reason {
			t.Errorf("#%d %s: got %s %q, want %s %q", i, ds[i].RequestID, ds[i].Outcome, ds[i].Reason, w.outcome, w.reason)
		}
	}
	if ds[4].Prior != order.Created {
		t.Errorf("copy's prior: %s", ds[4].Prior)
	}
	if ds[3].Compensation == nil || ds[3].Compensation.LimitOwner != "a" {
		t.Errorf("duplicate live order compensation: %+v", ds[3].Compensation)
	}
	if ds[2].Compensation == nil || ds[6].Compensation == nil || ds[0].Compensation != nil {
		t.Errorf("compensations: %+v %+v %+v", ds[2].Compensation, ds[6].Compensation, ds[0].Compensation)
	}
	st := stockOf(t, s)
	var live, orders int64
	s.Pool().QueryRow(ctx, `SELECT COALESCE(sum(quantity), 0), count(*) FROM orders`).Scan(&live, &orders)
	if st.Stock != 0 || live != 5 || orders != 3 {
		t.Errorf("stock %d, live units %d in %d orders; want 0, 5, 3", st.Stock, live, orders)
	}
	var rejected int64
	s.Pool().QueryRow(ctx, `SELECT count(*) FROM processed_requests WHERE outcome = 'REJECTED'`).Scan(&rejected)
	if rejected != 2 {
		t.Errorf("%d rejected requests, want 2", rejected)
	}
	// The whole batch again: every request is a duplicate, nothing changes.
	again, err := s.DecideBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range again[:6] {
		if d.Outcome != order.Duplicate || d.Prior != ds[i].Outcome && ds[i].Outcome != order.Duplicate {
			t.Errorf("redelivered #%d: %s prior %s", i, d.Outcome, d.Prior)
		}
		if d.Compensation != nil {
			t.Errorf("redelivered #%d wrote a second compensation", i)
		}
	}
	if st2 := stockOf(t, s); st2.Stock != 0 || st2.Version != st.Version {
		t.Errorf("redelivery changed stock: %+v → %+v", st, st2)
	}
}

// TestDecideBatchOneUserTwoRequests: one user's R1 (q=2) and R2 (q=1) in one
// batch. One by one, R1 is checked for stock first, so whether it fits
// decides both: the batch must agree, and the user's marker must name the
// order they hold.
func TestDecideBatchOneUserTwoRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		stock    int64
		outcomes [2]order.Outcome
		reasons  [2]string
		owners   [2]string // the compensation's limit owner ("-" ⇒ no compensation)
		left     int64
	}{
		// R1 does not fit: rejected for stock, R2 fits and is created; R1's
		// compensation hands the marker to R2.
		{"FirstDoesNotFit", 1, [2]order.Outcome{order.Rejected, order.Created},
			[2]string{order.ReasonDBStockMismatch, ""}, [2]string{"r2", "-"}, 0},
		// R1 fits and is created; R2, checked for stock first, no longer fits.
		{"SecondDoesNotFit", 2, [2]order.Outcome{order.Created, order.Rejected},
			[2]string{"", order.ReasonDBStockMismatch}, [2]string{"-", "r1"}, 0},
		// Both would fit: R2 is a second live order.
		{"BothFit", 3, [2]order.Outcome{order.Created, order.Rejected},
			[2]string{"", order.ReasonDuplicateLiveOrder}, [2]string{"-", "r1"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustStore(t)
			mustExec(t, s, `UPDATE item_stock SET stock = $1, initial_stock = $1`, tc.stock)
			ds, err := s.DecideBatch(ctx, []order.Request{req("r1", 1, 2), req("r2", 1, 1)})
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range ds {
				if d.Outcome != tc.outcomes[i] || d.Reason != tc.reasons[i] {
					t.Errorf("%s: %s %q, want %s %q", d.RequestID, d.Outcome, d.Reason, tc.outcomes[i], tc.reasons[i])
				}
				switch {
				case tc.owners[i] == "-" && d.Compensation != nil:
					t.Errorf("%s: unexpected compensation %+v", d.RequestID, d.Compensation)
				case tc.owners[i] != "-" && (d.Compensation == nil || d.Compensation.LimitOwner != tc.owners[i]):
					t.Errorf("%s: compensation %+v, want the marker handed to %s", d.RequestID, d.Compensation, tc.owners[i])
				}
			}
			if st := stockOf(t, s); st.Stock != tc.left {
				t.Errorf("stock %d, want %d", st.Stock, tc.left)
			}
			var orders int64
			if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM orders WHERE status = 'UNPAID'`).Scan(&orders); err != nil {
				t.Fatal(err)
			}
			if orders != 1 {
				t.Errorf("%d live orders, want 1", orders)
			}
		})
	}
}

// TestForeignReservationIsReadable: a requestId reused for another item gets
// its reservation refused, and its orderNo (shown in a 202) reads as
// REJECTED IDEMPOTENCY_KEY_REUSED, also when both are in one batch.
func TestForeignReservationIsReadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	other := func(rid, no string) order.Request {
		r := req(rid, 1, 1)
		r.OrderNo, r.ItemID = no, 11
		return r
	}
	if _, err := s.DecideBatch(ctx, []order.Request{req("x", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	ds, err := s.DecideBatch(ctx, []order.Request{other("x", "1-11-later"), req("y", 2, 1), other("y", "1-11-same-batch")})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Outcome != order.Foreign || ds[2].Outcome != order.Foreign || ds[1].Outcome != order.Created {
		t.Fatalf("decisions: %+v", ds)
	}
	for _, c := range []struct{ no, rid string }{{"1-11-later", "x"}, {"1-11-same-batch", "y"}} {
		o, err := s.GetOrder(ctx, c.no)
		if err != nil || o.Status != order.StatusRejected || o.Reason != order.ReasonKeyReused || o.RequestID != c.rid || o.ItemID != 11 {
			t.Errorf("GetOrder(%s) = %+v, %v", c.no, o, err)
		}
	}
	// The first reservations are untouched.
	for _, no := range []string{"1-10-x", "1-10-y"} {
		if o, err := s.GetOrder(ctx, no); err != nil || o.Status != order.StatusUnpaid {
			t.Errorf("GetOrder(%s) = %+v, %v", no, o, err)
		}
	}
	// Redelivered: nothing new.
	if _, err := s.DecideBatch(ctx, []order.Request{other("x", "1-11-later")}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDecideBatch measures one worker transaction of 500 orders of
// one hot item (the aggregated stock update).
func BenchmarkDecideBatch(b *testing.B) {
	ctx := context.Background()
	s := mustStore(b)
	mustExec(b, s, `UPDATE item_stock SET stock = 1000000000, initial_stock = 1000000000`)
	const size = 500
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		batch := make([]order.Request, size)
		for i := range batch {
			n++
			batch[i] = req(fmt.Sprintf("b%d", n), int64(n), 1)
		}
		if _, err := s.DecideBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size*b.N)/b.Elapsed().Seconds(), "orders/s")
}

// TestProcessedSince: every decided request of the item, created or
// rejected, comes back with what its dedup record is rebuilt from (ids,
// quantity, reservation time); another item's do not.
func TestProcessedSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	at := time.Now().UTC().Truncate(time.Microsecond)   // Postgres keeps microseconds
	created, rejected := req("a", 1, 2), req("b", 1, 1) // b: a second live order of user 1
	created.ReservedAt, rejected.ReservedAt = at, at.Add(time.Second)
	if ds, err := s.DecideBatch(ctx, []order.Request{created, rejected}); err != nil || ds[0].Outcome != order.Created || ds[1].Outcome != order.Rejected {
		t.Fatalf("decisions: %+v %v", ds, err)
	}
	got, err := s.ProcessedSince(ctx, 1, 10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]order.Request{}
	for _, r := range got {
		byID[r.RequestID] = r
	}
	if len(got) != 2 || len(byID) != 2 {
		t.Fatalf("processed: %+v, want a and b once each", got)
	}
	for _, w := range []order.Request{created, rejected} {
		if g := byID[w.RequestID]; g.OrderNo != w.OrderNo || g.UserID != w.UserID || g.ActivityID != w.ActivityID ||
			g.ItemID != w.ItemID || g.Quantity != w.Quantity || !g.ReservedAt.Equal(w.ReservedAt) {
			t.Errorf("processed %s: %+v, want %+v", w.RequestID, g, w)
		}
	}
	if others, err := s.ProcessedSince(ctx, 1, 11, time.Hour); err != nil || len(others) != 0 {
		t.Errorf("another item's: %+v %v, want none", others, err)
	}
}
