package bench

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
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
// thing per case, and checks the report's verdicts name the broken
// invariant (the checker itself is pkg/invariant's, tested there case by
// case; this holds the bench's mapping of its findings to verdicts).
func TestAuditCatches(t *testing.T) {
	t.Parallel()
	db := testenv.MustDatabase(t)
	rd := testenv.MustRedis(t)
	st, sr := stock.New(rd.Client, rd.Prefix), stocktest.On(rd.Client, rd.Prefix)
	orders := order.NewStore(db.Pool)
	item := func(a *auditor) stock.Item { return stock.Item{ActivityID: a.activityID, ItemID: 1} }

	tests := []struct {
		name      string
		dropRules bool
		breakFunc func(t *testing.T, a *auditor, acc map[string]*acceptance)
		fails     []string // the checks that must fail; none ⇒ all pass
	}{
		{"Consistent", false, nil, nil},
		{"LostAcceptedRequest", false, func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			acc["never-processed"] = &acceptance{orderNo: "x", accepts: 1}
		}, []string{"I4 nothing lost"}},
		{"Oversold", false, func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			ordertest.SetStock(t, db.Pool, a.activityID, 1, 0)
			stocktest.SetStock(t, sr, item(a), 0)
		}, []string{"I1 no oversell"}},
		{"RedisStockDrift", false, func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			stocktest.SetStock(t, sr, item(a), 2)
		}, []string{"I5 Redis agrees with Postgres"}},
		{"LimitMarkerMissing", false, func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			stocktest.DropMarker(t, sr, item(a), 2)
		}, []string{"I5 Redis agrees with Postgres"}},
		{"ExtraLimitMarker", false, func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			stocktest.SetMarker(t, sr, item(a), 3, "stray")
		}, []string{"I5 Redis agrees with Postgres"}},
		{"ReplayNamedAnotherOrder", false, func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			acc[fmt.Sprintf("a%d-u1", a.activityID)].orderNo = "someone-else"
		}, []string{"I3 one order per requestId", "I4 nothing lost"}},
		{"StockGivenBackTwice", false, func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			ordertest.SetStock(t, db.Pool, a.activityID, 1, 2)
			stocktest.SetStock(t, sr, item(a), 2)
		}, []string{"I1 no oversell"}},
		// The last cases take the table's rules away (for this test's
		// database), to see that the audit does not rely on them.
		{"SecondLiveOrder", true, func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			ordertest.PutOrder(t, db.Pool, a.activityID, order.SnapshotOrder{OrderNo: fmt.Sprintf("o%d-again", a.activityID),
				RequestID: fmt.Sprintf("a%d-again", a.activityID), UserID: 1, ItemID: 1, Quantity: 1, Status: order.StatusUnpaid})
		}, []string{"I1 no oversell", "I2 one live order per user"}},
		{"PaidAndClosed", true, func(t *testing.T, a *auditor, acc map[string]*acceptance) {
			ordertest.PutOrder(t, db.Pool, a.activityID, order.SnapshotOrder{OrderNo: fmt.Sprintf("o%d-pc", a.activityID),
				RequestID: fmt.Sprintf("a%d-pc", a.activityID), UserID: 4, ItemID: 1, Quantity: 1, Status: order.StatusClosed, Paid: true, Closed: true})
		}, []string{"I6 never paid and closed"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &auditor{orders: orders, st: st, activityID: int64(100 + i), items: []int64{1}}
			acc := mustSmallSale(t, a, db.Pool, sr)
			if tt.dropRules {
				ordertest.DropOrderRules(t, db.Pool)
			}
			if tt.breakFunc != nil {
				tt.breakFunc(t, a, acc)
			}
			au, err := a.audit(context.Background(), acc, map[int64][]int64{1: {1, 2, 3}})
			if err != nil {
				t.Fatal(err)
			}
			rep := &Report{Scenario: Scenario{Quantity: 1}, Audit: au, AcceptedRequests: len(acc)}
			rep.check()
			for _, c := range rep.Checks {
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
func mustSmallSale(t *testing.T, a *auditor, pool ordertest.DB, sr stocktest.Redis) map[string]*acceptance {
	t.Helper()
	id := a.activityID
	err := a.orders.UpsertActivity(context.Background(), order.Activity{ID: id, Name: "audit", StartsAt: time.Now(),
		EndsAt: time.Now().Add(time.Hour), PerUserLimit: 1, Items: []order.ItemStock{{ItemID: 1, InitialStock: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	ordertest.SetStock(t, pool, id, 1, 1)
	it := stock.Item{ActivityID: id, ItemID: 1}
	stocktest.SetStock(t, sr, it, 1)
	acc := map[string]*acceptance{}
	for user := int64(1); user <= 2; user++ {
		rid, no := fmt.Sprintf("a%d-u%d", id, user), fmt.Sprintf("%d-1-%d", id, user)
		ordertest.PutOrder(t, pool, id, order.SnapshotOrder{OrderNo: no, RequestID: rid, UserID: user, ItemID: 1, Quantity: 1,
			Status: order.StatusUnpaid})
		stocktest.SetMarker(t, sr, it, user, rid)
		acc[rid] = &acceptance{orderNo: no, accepts: 1}
	}
	return acc
}
