package bench

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

func TestPlan(t *testing.T) {
	t.Parallel()
	cfg := Config{Concurrency: 10, Requests: 5000, Items: 3, Quantity: 1, RetryShare: 0.1, RepeatShare: 0.05, ActivityID: 9, Seed: 7}
	work := plan(cfg, []int64{1, 2, 3})
	byID := map[string]request{}
	users := map[int64]bool{}
	var retries, repeats int
	for i, r := range work {
		switch r.kind {
		case retry:
			retries++
			first, ok := byID[r.id]
			if !ok || !bytes.Equal(first.body, r.body) {
				t.Fatalf("request %d retries %s with another payload or before it was sent", i, r.id)
			}
		case repeat:
			repeats++
			if !users[r.userID] {
				t.Fatalf("request %d repeats user %d never seen before", i, r.userID)
			}
			fallthrough
		default:
			if _, dup := byID[r.id]; dup {
				t.Fatalf("request %d reuses requestId %s", i, r.id)
			}
			byID[r.id] = r
		}
		users[r.userID] = true
		if r.itemID < 1 || r.itemID > 3 {
			t.Fatalf("request %d for item %d", i, r.itemID)
		}
	}
	// Binomial(5000, p): ±5 standard deviations is far outside chance.
	if retries < 400 || retries > 600 || repeats < 170 || repeats > 330 {
		t.Errorf("retries %d (want ~500), repeats %d (want ~250)", retries, repeats)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	lat := make([]time.Duration, 100)
	for i := range lat {
		lat[i] = time.Duration(i+1) * time.Millisecond
	}
	for q, want := range map[float64]time.Duration{.5: 50 * time.Millisecond, .99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		if got := pct(lat, q); got != want {
			t.Errorf("pct(%v) = %v, want %v", q, got, want)
		}
	}
}

func TestLagZeroSince(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name    string
		samples []lagSample
		want    time.Duration
	}{
		{"ZeroAtLoadEnd", []lagSample{{at(-100), 0}, {at(100), 0}}, 0},
		{"CatchesUp", []lagSample{{at(-100), 50}, {at(100), 20}, {at(300), 0}, {at(400), 0}}, 300 * time.Millisecond},
		{"BouncesBack", []lagSample{{at(100), 0}, {at(200), 5}, {at(500), 0}}, 500 * time.Millisecond},
		{"NeverZero", []lagSample{{at(100), 3}}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &scraper{samples: tt.samples}
			if got := s.zeroSince(t0); got != tt.want {
				t.Errorf("zeroSince = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAuditCatches builds a small consistent activity by hand, breaks one
// thing per case, and checks the audit names the broken invariant.
func TestAuditCatches(t *testing.T) {
	t.Parallel()
	db := testenv.MustDatabase(t)
	rd := testenv.MustRedis(t)
	ctx := context.Background()
	st := stock.New(rd.Client, rd.Prefix)

	tests := []struct {
		name      string
		breakFunc func(t *testing.T, a *auditor, acc map[string]*acceptance)
		fails     []string // the checks that must fail; none ⇒ all pass
	}{
		{"Consistent", nil, nil},
		{"LostAcceptedRequest", func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			acc["never-processed"] = &acceptance{orderNo: "x", accepts: 1}
		}, []string{"I4 nothing lost"}},
		{"Oversold", func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			mustExec(t, a, `UPDATE item_stock SET initial_stock = 1, stock = 0 WHERE activity_id = $1`, a.activityID)
			rd.Client.Set(ctx, stocktest.KeysOf(st, stock.Item{ActivityID: a.activityID, ItemID: 1}).Stock, 0, 0)
		}, []string{"I1 no oversell", "counts add up"}},
		{"RedisStockDrift", func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			rd.Client.Set(ctx, stocktest.KeysOf(st, stock.Item{ActivityID: a.activityID, ItemID: 1}).Stock, 2, 0)
		}, []string{"I5 Redis agrees with Postgres"}},
		{"LimitMarkerMissing", func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			stocktest.DropMarker(t, st, stock.Item{ActivityID: a.activityID, ItemID: 1}, 2)
		}, []string{"I5 Redis agrees with Postgres"}},
		{"ExtraLimitMarker", func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			rd.Client.Set(ctx, stocktest.KeysOf(st, stock.Item{ActivityID: a.activityID, ItemID: 1}).Limit(3), "stray", time.Hour)
		}, []string{"I5 Redis agrees with Postgres"}},
		{"ReplayNamedAnotherOrder", func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			acc[fmt.Sprintf("a%d-u1", a.activityID)].orderNo = "someone-else"
		}, []string{"I3 one order per requestId"}},
		{"StockGivenBackTwice", func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			mustExec(t, a, `UPDATE item_stock SET stock = 2 WHERE activity_id = $1`, a.activityID)
			rd.Client.Set(ctx, stocktest.KeysOf(st, stock.Item{ActivityID: a.activityID, ItemID: 1}).Stock, 2, 0)
		}, []string{"I1 no oversell"}},
		// The last cases take the table's rules away (for this test's
		// database), to see that the audit does not rely on them.
		{"SecondLiveOrder", func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			mustExec(t, a, `DROP INDEX IF EXISTS orders_one_live_per_user`)
			mustExec(t, a, `INSERT INTO orders (order_no, request_id, user_id, activity_id, item_id, quantity, status, reserved_at)
				VALUES ($2, $3, 1, $1, 1, 1, 'UNPAID', now())`, a.activityID, fmt.Sprintf("o%d-again", a.activityID), fmt.Sprintf("a%d-again", a.activityID))
		}, []string{"I1 no oversell", "I2 one live order per user", "counts add up"}},
		{"PaidAndClosed", func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			mustExec(t, a, `ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_status_matches_times, DROP CONSTRAINT IF EXISTS orders_check`)
			mustExec(t, a, `UPDATE orders SET status = 'PAID', paid_at = now(), closed_at = now() WHERE request_id = $1`,
				fmt.Sprintf("a%d-u1", a.activityID))
		}, []string{"I6 never paid and closed"}},
	}
	// Checks whose verdict a case leaves open: with two live orders the
	// user's marker names one of them, and which one the audit compares it
	// with depends on map order.
	mayFail := map[string][]string{"SecondLiveOrder": {"I5 Redis agrees with Postgres"}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &auditor{pool: db.Pool, st: st, activityID: int64(100 + i), items: []int64{1}}
			acc := mustSmallSale(t, a, st)
			if tt.breakFunc != nil {
				tt.breakFunc(t, a, acc)
			}
			au, err := a.audit(ctx, acc, map[int64][]int64{1: {1, 2, 3}})
			if err != nil {
				t.Fatal(err)
			}
			rep := &Report{Scenario: Scenario{Quantity: 1}, Audit: au, AcceptedRequests: len(acc)}
			rep.check()
			for _, c := range rep.Checks {
				if slices.Contains(mayFail[tt.name], c.Name) {
					continue
				}
				if want := !slices.Contains(tt.fails, c.Name); c.OK != want {
					t.Errorf("%s: ok=%v, want %v (%s)", c.Name, c.OK, want, c.Detail)
				}
			}
			if rep.OK != (len(tt.fails) == 0) {
				t.Errorf("report OK = %v", rep.OK)
			}
		})
	}
}

// mustSmallSale: 3 units, two users hold one live order each, one unit left,
// in Postgres and Redis alike; it returns what the client was told.
func mustSmallSale(t *testing.T, a *auditor, st *stock.Store) map[string]*acceptance {
	t.Helper()
	id := a.activityID
	mustExec(t, a, `INSERT INTO activities (id, name, starts_at, ends_at) VALUES ($1, 'audit', now(), now() + interval '1 hour')`, id)
	mustExec(t, a, `INSERT INTO item_stock (activity_id, item_id, initial_stock, stock) VALUES ($1, 1, 3, 1)`, id)
	it := stock.Item{ActivityID: id, ItemID: 1}
	stocktest.SetStock(t, st, it, 1)
	acc := map[string]*acceptance{}
	for user := int64(1); user <= 2; user++ {
		rid, no := fmt.Sprintf("a%d-u%d", id, user), fmt.Sprintf("%d-1-%d", id, user)
		mustExec(t, a, `INSERT INTO orders (order_no, request_id, user_id, activity_id, item_id, quantity, reserved_at)
			VALUES ($1, $2, $3, $4, 1, 1, now())`, no, rid, user, id)
		mustExec(t, a, `INSERT INTO processed_requests (request_id, outcome, order_no, user_id, activity_id, item_id, quantity, reserved_at)
			VALUES ($1, 'CREATED', $2, $3, $4, 1, 1, now())`, rid, no, user, id)
		stocktest.SetMarker(t, st, it, user, rid)
		acc[rid] = &acceptance{orderNo: no, accepts: 1}
	}
	return acc
}

func mustExec(t *testing.T, a *auditor, sql string, args ...any) {
	t.Helper()
	if _, err := a.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}
