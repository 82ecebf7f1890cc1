package order_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
)

// history is an order's outbox rows as "v<version> <status> <reason>".
func history(tb testing.TB, s *order.Store, orderNo string) []string {
	tb.Helper()
	evs, err := s.EventsOf(context.Background(), orderNo)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		st, err := event.DecodeStatus(e.Payload)
		if err != nil {
			tb.Fatalf("event %d of %s: %v", e.Version, orderNo, err)
		}
		if st.OrderNo != orderNo || st.Version != e.Version || st.Status != e.Status || st.Reason != e.Reason {
			tb.Errorf("payload %+v disagrees with its row %+v", st, e)
		}
		out = append(out, fmt.Sprintf("v%d %s %s", e.Version, e.Status, e.Reason))
	}
	return out
}

func wantHistory(tb testing.TB, s *order.Store, orderNo string, want ...string) {
	tb.Helper()
	if got := history(tb, s, orderNo); fmt.Sprint(got) != fmt.Sprint(want) {
		tb.Errorf("events of %s: %q, want %q", orderNo, got, want)
	}
}

const orderTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func TestStatusEventsOfEveryChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	batch := func(user int64, no string) order.Decision {
		ds, err := s.DecideBatch(ctx, []order.Request{{RequestID: "r-" + no, OrderNo: no, UserID: user, ActivityID: 1, ItemID: 10,
			Quantity: 1, ReservedAt: time.Now(), Held: true, TraceParent: orderTrace}})
		if err != nil {
			t.Fatal(err)
		}
		return ds[0]
	}

	t.Run("CreatedThenPaid", func(t *testing.T) {
		batch(1, "1-10-a")
		wantHistory(t, s, "1-10-a", "v1 UNPAID ")
		if _, err := s.Pay(ctx, "1-10-a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pay(ctx, "1-10-a"); err != nil {
			t.Fatal(err)
		}
		wantHistory(t, s, "1-10-a", "v1 UNPAID ", "v2 PAID ")
		evs, _ := s.EventsOf(ctx, "1-10-a")
		if evs[0].TraceParent != orderTrace || evs[1].TraceParent != orderTrace {
			t.Errorf("trace contexts %q, %q: want the order's %q (pay ran without a span)", evs[0].TraceParent, evs[1].TraceParent, orderTrace)
		}
	})
	t.Run("DuplicateLiveOrderIsRejected", func(t *testing.T) {
		if d := batch(1, "1-10-b"); d.Outcome != order.Rejected {
			t.Fatalf("second order of user 1: %s", d.Outcome)
		}
		wantHistory(t, s, "1-10-b", "v1 REJECTED DUPLICATE_LIVE_ORDER")
		// A redelivery changes nothing, so it writes nothing.
		batch(1, "1-10-b")
		wantHistory(t, s, "1-10-b", "v1 REJECTED DUPLICATE_LIVE_ORDER")
	})
	t.Run("ClosedByTimeout", func(t *testing.T) {
		batch(2, "1-10-c")
		age(t, s, time.Hour, "1-10-c")
		if _, err := s.CloseExpired(ctx, time.Minute, 10); err != nil {
			t.Fatal(err)
		}
		wantHistory(t, s, "1-10-c", "v1 UNPAID ", "v2 CLOSED PAYMENT_TIMEOUT")
		if o, _ := s.GetOrder(ctx, "1-10-c"); o.Reason != order.ReasonPaymentTimeout {
			t.Errorf("closed order's reason %q", o.Reason)
		}
	})
	t.Run("Cancelled", func(t *testing.T) {
		batch(3, "1-10-d")
		before := stockOf(t, s).Stock
		pending, _ := s.CountPendingCompensations(ctx)
		o, comp, err := s.Cancel(ctx, "1-10-d", 3)
		if err != nil || comp == nil || o.Status != order.StatusClosed || o.Reason != order.ReasonCancelled {
			t.Fatalf("cancel: %+v %+v %v", o, comp, err)
		}
		if after := stockOf(t, s).Stock; after != before+1 {
			t.Errorf("stock %d after cancel, want %d", after, before+1)
		}
		again, comp, err := s.Cancel(ctx, "1-10-d", 3)
		if err != nil || comp != nil || again.Reason != order.ReasonCancelled {
			t.Fatalf("second cancel is not idempotent: %+v %+v %v", again, comp, err)
		}
		wantHistory(t, s, "1-10-d", "v1 UNPAID ", "v2 CLOSED CANCELLED")
		if n, _ := s.CountPendingCompensations(ctx); n != pending+1 {
			t.Errorf("%d pending compensations, want %d and the cancel's one", n, pending)
		}
	})
	t.Run("CancelRefusals", func(t *testing.T) {
		for _, c := range []struct {
			name, orderNo string
			user          int64
			want          error
		}{
			{"Paid", "1-10-a", 1, order.ErrOrderPaid},
			{"ClosedByTimeout", "1-10-c", 2, order.ErrOrderClosed},
			{"Rejected", "1-10-b", 1, order.ErrOrderRejected},
			{"AnotherUsers", "1-10-a", 2, order.ErrNotFound},
			{"Unknown", "1-10-zz", 1, order.ErrNotFound},
		} {
			t.Run(c.name, func(t *testing.T) {
				if _, _, err := s.Cancel(ctx, c.orderNo, c.user); !errors.Is(err, c.want) {
					t.Errorf("cancel: %v, want %v", err, c.want)
				}
			})
		}
		wantHistory(t, s, "1-10-a", "v1 UNPAID ", "v2 PAID ")
	})
}

func TestRelayEventsOneVersionOfAnOrderAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	mustPaidOrder(t, s, 1, 1)
	take := func(ids func([]order.StatusEvent) []int64, perr error) []string {
		var got []string
		if _, err := s.RelayEvents(ctx, 10, func(_ context.Context, evs []order.StatusEvent) ([]int64, error) {
			for _, e := range evs {
				got = append(got, fmt.Sprintf("v%d %s", e.Version, e.Status))
			}
			return ids(evs), perr
		}); err != nil && !errors.Is(err, perr) {
			t.Fatal(err)
		}
		return got
	}
	all := func(evs []order.StatusEvent) []int64 {
		var ids []int64
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
		return ids
	}
	none := func([]order.StatusEvent) []int64 { return nil }

	// A failed publish marks nothing: the same version comes again.
	if got := take(none, errors.New("broker down")); fmt.Sprint(got) != "[v1 UNPAID]" {
		t.Fatalf("first hand: %q", got)
	}
	// While one replica holds version 1, another is handed nothing of the
	// order (not version 2).
	var other []string
	var wg sync.WaitGroup
	got := take(func(evs []order.StatusEvent) []int64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other = take(all, nil)
		}()
		wg.Wait()
		return all(evs)
	}, nil)
	if fmt.Sprint(got) != "[v1 UNPAID]" || len(other) != 0 {
		t.Fatalf("replica 1 was handed %q, replica 2 %q: want v1 and nothing", got, other)
	}
	if got := take(all, nil); fmt.Sprint(got) != "[v2 PAID]" {
		t.Fatalf("after v1: %q", got)
	}
	if got := take(all, nil); len(got) != 0 {
		t.Fatalf("after v2: %q", got)
	}
	// A row whose transaction has not committed is never handed.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `INSERT INTO order_events (order_no, version, status, payload) VALUES ('1-10-x', 1, 'UNPAID', '{}')`); err != nil {
		t.Fatal(err)
	}
	if got := take(all, nil); len(got) != 0 {
		t.Fatalf("an uncommitted row was handed: %q", got)
	}
	n, _, err := s.EventBacklog(ctx)
	if err != nil || n != 0 {
		t.Fatalf("backlog %d %v, want 0", n, err)
	}
	if pruned, err := s.PruneEvents(ctx, time.Nanosecond, 100); err != nil || pruned != 2 {
		t.Fatalf("pruned %d %v, want the 2 published", pruned, err)
	}
}

// TestPayCancelCloseRace drives pay, cancel and the closer at one due
// UNPAID order at once, many times: exactly one wins, and the order's
// events, stock and compensations are those of the winner alone.
func TestPayCancelCloseRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	wins := map[string]int{}
	const rounds = 40
	for i := range rounds {
		user := int64(1000 + i)
		no := mustOrder(t, s, user, 1)
		age(t, s, time.Hour, no)
		before := stockOf(t, s).Stock
		var payErr, cancelErr, closeErr error
		var comp *order.Compensation
		var closed []order.Compensation
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; _, payErr = s.Pay(ctx, no) })
		wg.Go(func() { <-start; _, comp, cancelErr = s.Cancel(ctx, no, user) })
		wg.Go(func() { <-start; closed, closeErr = s.CloseExpired(ctx, time.Minute, 10) })
		close(start)
		wg.Wait()
		if closeErr != nil {
			t.Fatal(closeErr)
		}
		o, err := s.GetOrder(ctx, no)
		if err != nil {
			t.Fatal(err)
		}
		winner := o.Status + " " + o.Reason
		wins[winner]++
		switch winner {
		case "PAID ":
			if payErr != nil || !errors.Is(cancelErr, order.ErrOrderPaid) || len(closed) != 0 {
				t.Errorf("%s paid, yet pay: %v, cancel: %v, closed %d", no, payErr, cancelErr, len(closed))
			}
		case "CLOSED CANCELLED":
			if cancelErr != nil || comp == nil || !errors.Is(payErr, order.ErrOrderClosed) || len(closed) != 0 {
				t.Errorf("%s cancelled, yet pay: %v, cancel: %v %v, closed %d", no, payErr, cancelErr, comp, len(closed))
			}
		case "CLOSED PAYMENT_TIMEOUT":
			if len(closed) != 1 || !errors.Is(payErr, order.ErrOrderClosed) || !errors.Is(cancelErr, order.ErrOrderClosed) {
				t.Errorf("%s closed, yet pay: %v, cancel: %v, closed %d", no, payErr, cancelErr, len(closed))
			}
		default:
			t.Fatalf("%s ended %s", no, winner)
		}
		wantStock := before
		if o.Status == order.StatusClosed {
			wantStock++
			wantHistory(t, s, no, "v1 UNPAID ", "v2 CLOSED "+o.Reason)
		} else {
			wantHistory(t, s, no, "v1 UNPAID ", "v2 PAID ")
		}
		if got := stockOf(t, s).Stock; got != wantStock {
			t.Errorf("%s: stock %d, want %d", no, got, wantStock)
		}
	}
	t.Logf("winners over %d rounds: %v", rounds, wins)
}

// TestRelayReadCostsTheLimitNotTheBacklog: the relay's read examines about
// the rows it hands, however many wait behind them, even when the
// planner's statistics were taken while the outbox was drained (its
// earlier form walked the whole partial index per candidate then: a relay
// behind by tens of thousands of events took seconds per call and timed
// out). It still holds back an order's version while the previous one is
// unpublished.
func TestRelayReadCostsTheLimitNotTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	// A drained outbox, analyzed: the planner believes nothing is unpublished.
	mustExec(t, s, `INSERT INTO order_events (order_no, version, status, payload, published_at)
		SELECT 'p' || g, 1, 'UNPAID', '{}', now() FROM generate_series(1, 3000) g`)
	mustExec(t, s, `ANALYZE order_events`)
	// Then a backlog: an order with two versions, 300 second versions of
	// published orders, 2000 new orders.
	mustExec(t, s, `INSERT INTO order_events (order_no, version, status, payload) VALUES ('q', 1, 'UNPAID', '{}')`)
	mustExec(t, s, `INSERT INTO order_events (order_no, version, status, payload)
		SELECT 'p' || g, 2, 'PAID', '{}' FROM generate_series(1, 300) g`)
	mustExec(t, s, `INSERT INTO order_events (order_no, version, status, payload) VALUES ('q', 2, 'PAID', '{}')`)
	mustExec(t, s, `INSERT INTO order_events (order_no, version, status, payload)
		SELECT 'n' || g, 1, 'UNPAID', '{}' FROM generate_series(1, 2000) g`)
	const limit = 500

	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var plan []struct{ Plan map[string]any }
	err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+order.RelayQuery, limit).Scan(&plan)
	tx.Rollback(ctx) //nolint:errcheck
	if err != nil || len(plan) != 1 {
		t.Fatalf("explaining the relay's read: %v (%d plans)", err, len(plan))
	}
	var removed float64
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if r, ok := n["Rows Removed by Filter"].(float64); ok {
			loops, _ := n["Actual Loops"].(float64)
			removed += r * max(loops, 1)
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				walk(m)
			}
		}
	}
	walk(plan[0].Plan)
	if removed > limit {
		t.Errorf("the read of %d candidates examined and dropped %.0f rows, want at most %d; plan: %v", limit, removed, limit, plan[0].Plan)
	}

	var handed []string
	if _, err := s.RelayEvents(ctx, limit, func(_ context.Context, evs []order.StatusEvent) ([]int64, error) {
		for _, e := range evs {
			handed = append(handed, fmt.Sprintf("%s v%d", e.OrderNo, e.Version))
		}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(handed) != limit-1 || handed[0] != "q v1" || handed[1] != "p1 v2" || handed[301] != "n1 v1" {
		t.Fatalf("handed %d: %q…, want q v1, the 300 second versions, then new orders (not q v2)", len(handed), handed[:min(len(handed), 5)])
	}
	for _, h := range handed {
		if h == "q v2" {
			t.Fatal("q v2 handed while q v1 is unpublished")
		}
	}
}

// TestStatementsByKeyFindTheirRowByTheKey: a statement that changes one
// order or compensation by its key reaches the row through the key's index,
// even when the planner's statistics were taken while no order was UNPAID
// and no compensation pending. Written as status = 'UNPAID', the condition
// matched the partial index's predicate and such statistics made the
// planner walk that whole index instead (every unpaid order per payment).
func TestStatementsByKeyFindTheirRowByTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustStore(t)
	// Analyzed while every order is paid and every compensation applied.
	mustExec(t, s, `INSERT INTO orders (order_no, request_id, user_id, activity_id, item_id, quantity, status, reserved_at, created_at, paid_at)
		SELECT 'p' || g, 'rp' || g, g, 1, 10, 1, 'PAID', now(), now() - interval '2 hours', now() FROM generate_series(1, 20000) g`)
	mustExec(t, s, `INSERT INTO redis_compensations (request_id, order_no, activity_id, item_id, user_id, quantity, reason, applied_at)
		SELECT 'rp' || g, 'p' || g, 1, 10, g, 1, 'X', now() FROM generate_series(1, 20000) g`)
	mustExec(t, s, `ANALYZE orders`)
	mustExec(t, s, `ANALYZE redis_compensations`)
	// Then a flood: unpaid orders, pending compensations.
	mustExec(t, s, `INSERT INTO orders (order_no, request_id, user_id, activity_id, item_id, quantity, reserved_at, created_at)
		SELECT 'n' || g, 'rn' || g, 100000 + g, 1, 10, 1, now() - interval '2 hours', now() - interval '2 hours' FROM generate_series(1, 5000) g`)
	mustExec(t, s, `INSERT INTO redis_compensations (request_id, order_no, activity_id, item_id, user_id, quantity, reason)
		SELECT 'rn' || g, 'n' || g, 1, 10, 100000 + g, 1, 'X' FROM generate_series(1, 5000) g`)

	for _, c := range []struct {
		name, sql, table, index string
		args                    []any
	}{
		{"pay", order.PayOrderSQL, "orders", "orders_order_no_key", []any{"n42"}},
		{"cancel", order.CancelOrderSQL, "orders", "orders_order_no_key", []any{"n42", int64(100042), order.ReasonCancelled}},
		{"close", order.CloseDueSQL, "o", "orders_order_no_key", []any{time.Hour, 100, order.ReasonPaymentTimeout}},
		{"mark applied", order.MarkAppliedSQL, "redis_compensations", "redis_compensations_pkey", []any{int64(20042)}},
	} {
		var plan []struct{ Plan map[string]any }
		if err := s.Pool().QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+c.sql, c.args...).Scan(&plan); err != nil || len(plan) != 1 {
			t.Fatalf("%s: explaining: %v (%d plans)", c.name, err, len(plan))
		}
		var got []string
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			if typ, _ := n["Node Type"].(string); n["Alias"] == c.table && strings.HasSuffix(typ, "Scan") {
				name, _ := n["Index Name"].(string)
				got = append(got, fmt.Sprintf("%s %s", n["Node Type"], name))
			}
			kids, _ := n["Plans"].([]any)
			for _, k := range kids {
				if m, ok := k.(map[string]any); ok {
					walk(m)
				}
			}
		}
		walk(plan[0].Plan)
		want := []string{"Index Scan " + c.index}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s reaches %s by %q, want %q", c.name, c.table, got, want)
		}
	}
}
