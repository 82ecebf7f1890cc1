package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

// Bucketed stock end to end: an item's stock split over B Redis buckets
// (items[].buckets), users routed by FNV-1a(userId) mod B, the mover against
// stranded stock, and the reconciler, closer and worker on the buckets.

// mustBucketedSale creates and preheats activity id with one item of units
// split over buckets, and returns the item; the sale runs from a minute ago
// for an hour.
func (p *pipeline) mustBucketedSale(tb testing.TB, id, item, units int64, buckets, perUserLimit int) stock.Item {
	tb.Helper()
	a := client.ActivityUpsert{Name: fmt.Sprintf("sale %d", id), StartsAt: time.Now().Add(-time.Minute).UTC(),
		EndsAt: time.Now().Add(time.Hour).UTC(), PerUserLimit: perUserLimit,
		Items: []client.ItemUpsert{{ItemID: item, Stock: units, Buckets: buckets}}}
	ctx := contractCtx(tb, "admin")
	// Both calls are idempotent: a 503 (the order store past its timeout on
	// a busy machine) is retried, as in mustActivity.
	if err := client.RetryIdempotent(ctx, func() error { _, err := p.api().PutActivity(ctx, id, a); return err }); err != nil {
		tb.Fatalf("creating activity: %v", err)
	}
	if err := client.RetryIdempotent(ctx, func() error { _, err := p.api().Preheat(ctx, id); return err }); err != nil {
		tb.Fatalf("preheating: %v", err)
	}
	return stock.Item{ActivityID: id, ItemID: item}
}

// bucketStocks is each bucket's Redis stock (-1: missing).
func (p *pipeline) bucketStocks(tb testing.TB, it stock.Item, buckets int) []int64 {
	tb.Helper()
	return stocktest.BucketStocks(tb, p.StockRedis, it, buckets)
}

func sum(ns []int64) int64 {
	var t int64
	for _, n := range ns {
		t += n
	}
	return t
}

// usersIn returns n userIds routed to bucket b of buckets, from first on.
func usersIn(b, buckets, n int, first int64) []int64 {
	var out []int64
	for u := first; len(out) < n; u++ {
		if stock.BucketOf(u, buckets) == b {
			out = append(out, u)
		}
	}
	return out
}

// waitBucketsDrained waits until every bucket's journal is empty and no
// compensation is pending.
func (p *pipeline) waitBucketsDrained(tb testing.TB, it stock.Item, buckets int) {
	tb.Helper()
	testenv.WaitFor(tb, 30*time.Second, "the pipeline to drain", func() bool {
		n, err := p.Orders.CountPendingCompensations(context.Background())
		if err != nil || n != 0 {
			return false
		}
		for b := range buckets {
			bi := it
			bi.Bucket = b
			if p.journalLen(tb, bi) != 0 {
				return false
			}
		}
		return true
	})
}

// assertBucketInvariants is assertInvariants for a bucketed item: the
// checker reads the item's bucket count from Postgres and holds I5 over the
// buckets (their stocks plus units in transfer against the DB stock; each
// live order's marker in its user's bucket, and no other).
func (p *pipeline) assertBucketInvariants(tb testing.TB, it stock.Item, buckets int) {
	tb.Helper()
	if s := p.dbStock(tb, it); s.Buckets != buckets {
		tb.Fatalf("item %s has %d buckets in Postgres, want %d", it, s.Buckets, buckets)
	}
	p.assertInvariants(tb, it)
}

// testBucketsAdminAndPreheat: items[].buckets is validated (400, nothing
// changed), preheat splits the stock ⌊S/B⌋ (+1 for the first S mod B) and
// is idempotent per bucket, and the count is fixed once preheated (409).
// One bucket keeps the plain layout: no "buckets" field, no bucket keys.
func testBucketsAdminAndPreheat(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway"}, nil)
	auth := []string{"Authorization", "Bearer " + p.Admin}
	ctx := context.Background()
	put := func(items string) apiResponse {
		body := fmt.Sprintf(`{"name":"b","startsAt":%q,"endsAt":%q,"perUserLimit":1,"items":%s}`,
			time.Now().Add(-time.Minute).UTC().Format(time.RFC3339), time.Now().Add(time.Hour).UTC().Format(time.RFC3339), items)
		return p.do(t, http.MethodPut, "/admin/v1/activities/61", "application/json", body, auth...)
	}
	for _, bad := range []string{`0`, `65`, `-1`, `"4"`, `2.5`} {
		if r := put(`[{"itemId":1,"stock":10,"buckets":` + bad + `}]`); r.Status != http.StatusBadRequest || r.Code() != "INVALID_REQUEST" {
			t.Errorf("buckets %s: %d %v, want 400 INVALID_REQUEST", bad, r.Status, r.Body)
		}
	}
	if _, err := p.Orders.GetActivity(ctx, 61); err == nil {
		t.Fatalf("a refused upsert created the activity")
	}
	if r := put(`[{"itemId":1,"stock":10,"buckets":4},{"itemId":2,"stock":7}]`); r.Status != http.StatusOK {
		t.Fatalf("upsert: %d %v", r.Status, r.Body)
	}
	// Before the preheat the count may still change.
	if r := put(`[{"itemId":1,"stock":10,"buckets":3},{"itemId":2,"stock":7}]`); r.Status != http.StatusOK {
		t.Fatalf("changing buckets before the preheat: %d %v", r.Status, r.Body)
	}
	pre, err := p.api().Preheat(contractCtx(t, "preheat"), 61)
	if err != nil || len(pre.Items) == 0 || !slices.ContainsFunc(pre.Items, func(i client.ActivityItem) bool { return i.ItemID == 1 && i.Buckets == 3 }) {
		t.Fatalf("preheat: %+v %v, want item 1 shown with 3 buckets", pre.Items, err)
	}
	it := stock.Item{ActivityID: 61, ItemID: 1}
	if got := p.bucketStocks(t, it, 3); fmt.Sprint(got) != "[4 3 3]" {
		t.Errorf("bucket stocks %v, want [4 3 3]", got)
	}
	for b := range 3 {
		bi := it
		bi.Bucket = b
		if v := stocktest.SaleField(t, p.StockRedis, bi, "buckets"); v != "3" {
			t.Errorf("bucket %d's sale holds buckets %q, want 3", b, v)
		}
	}
	// Item 2 has one bucket: today's keys exactly (their names are
	// pkg/stock's TestBucketTagsAndRouting's).
	plain := stock.Item{ActivityID: 61, ItemID: 2}
	sale := stocktest.Sale(t, p.StockRedis, plain)
	if _, bucketed := sale["buckets"]; p.redisStock(t, plain) != 7 || bucketed {
		t.Errorf("item 2: stock %d, sale %v; want 7 and no buckets field", p.redisStock(t, plain), sale)
	}
	if keys := stocktest.BucketKeys(t, p.StockRedis, plain); len(keys) != 0 {
		t.Errorf("item 2 has %d bucket keys", len(keys))
	}
	// A second preheat keeps each bucket's running stock.
	stocktest.AddStock(t, p.StockRedis, stock.Item{ActivityID: 61, ItemID: 1, Bucket: 2}, -2)
	if _, err := p.api().Preheat(contractCtx(t, "preheat"), 61); err != nil {
		t.Fatalf("second preheat: %v", err)
	}
	if got := p.bucketStocks(t, it, 3); fmt.Sprint(got) != "[4 3 1]" {
		t.Errorf("bucket stocks after a second preheat %v, want [4 3 1]", got)
	}
	// Preheated: the count is fixed; the same count, or none, is fine.
	if r := put(`[{"itemId":1,"stock":10,"buckets":5},{"itemId":2,"stock":7}]`); r.Status != http.StatusConflict || r.Code() != "BUCKETS_FIXED" {
		t.Errorf("changing buckets after the preheat: %d %v, want 409 BUCKETS_FIXED", r.Status, r.Body)
	}
	for _, items := range []string{`[{"itemId":1,"stock":10,"buckets":3},{"itemId":2,"stock":7}]`, `[{"itemId":1,"stock":10},{"itemId":2,"stock":7}]`} {
		if r := put(items); r.Status != http.StatusOK {
			t.Errorf("upsert %s: %d %v", items, r.Status, r.Body)
		}
	}
	if s := p.dbStock(t, it); s.Buckets != 3 {
		t.Errorf("buckets in Postgres %d, want 3", s.Buckets)
	}
}

// testBucketsRoutingAndLimit: a user always lands in the bucket
// FNV-1a(userId) mod B (the orderNo and the marker say which), and the
// per-user limit is exact over many concurrent requests of the same users.
func testBucketsRoutingAndLimit(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	const B = 4
	it := p.mustBucketedSale(t, 62, 1, 1000, B, 1)
	const users, tries = 40, 5
	var mu sync.Mutex
	accepted := map[int64][]string{}
	var wg sync.WaitGroup
	for u := int64(1); u <= users; u++ {
		for k := range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := p.order(t, orderBody{RequestID: fmt.Sprintf("rt-%d-%d", u, k), UserID: u, ActivityID: 62, ItemID: 1, Quantity: 1})
				switch {
				case r.Status == http.StatusAccepted:
					mu.Lock()
					accepted[u] = append(accepted[u], r.Str("orderNo"))
					mu.Unlock()
				case r.Code() != "ALREADY_PURCHASED":
					t.Errorf("user %d: %d %v", u, r.Status, r.Body)
				}
			}()
		}
	}
	wg.Wait()
	for u := int64(1); u <= users; u++ {
		if len(accepted[u]) != 1 {
			t.Errorf("user %d: %d requests accepted, want exactly 1", u, len(accepted[u]))
			continue
		}
		b := stock.BucketOf(u, B)
		no := accepted[u][0]
		if hasSuffix := strings.HasSuffix(no, fmt.Sprintf("-b%d", b)); b > 0 && !hasSuffix || b == 0 && strings.Contains(no[len(no)-4:], "-b") {
			t.Errorf("user %d (bucket %d) got orderNo %s", u, b, no)
		}
	}
	p.waitBucketsDrained(t, it, B)
	if s := p.dbStock(t, it); s.Stock != 1000-users {
		t.Errorf("db stock %d, want %d", s.Stock, 1000-users)
	}
	perBucket := make([]int64, B)
	for u := int64(1); u <= users; u++ {
		perBucket[stock.BucketOf(u, B)]++
	}
	for b, n := range p.bucketStocks(t, it, B) {
		if want := 250 - perBucket[b]; n != want {
			t.Errorf("bucket %d: stock %d, want %d (its users bought %d)", b, n, want, perBucket[b])
		}
	}
	p.assertBucketInvariants(t, it, B)
	if code, out := p.reconcile(t, "--once"); code != 0 {
		t.Errorf("reconciler: exit %d\n%s", code, out)
	}
}

// testBucketsReusedRequestIDAcrossUsers: the same requestId sent by users of
// two buckets is accepted by each bucket (no atomic step sees both); the
// worker decides the second in Postgres: REJECTED IDEMPOTENCY_KEY_REUSED,
// which GET returns, and its unit goes back to its own bucket.
func testBucketsReusedRequestIDAcrossUsers(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, nil)
	const B = 4
	it := p.mustBucketedSale(t, 63, 1, 40, B, 1)
	u1, u2 := usersIn(1, B, 1, 1)[0], usersIn(2, B, 1, 1)[0]
	first := p.mustAccept(t, orderBody{RequestID: "reused", UserID: u1, ActivityID: 63, ItemID: 1, Quantity: 1})
	p.waitStatus(t, first.Str("orderNo"), order.StatusUnpaid)
	second := p.order(t, orderBody{RequestID: "reused", UserID: u2, ActivityID: 63, ItemID: 1, Quantity: 1})
	if second.Status != http.StatusAccepted || second.Str("orderNo") == first.Str("orderNo") {
		t.Fatalf("second (another bucket): %d %v", second.Status, second.Body)
	}
	if g := p.waitStatus(t, second.Str("orderNo"), order.StatusRejected); g.Reason != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("second: %+v, want REJECTED IDEMPOTENCY_KEY_REUSED", g)
	}
	p.waitBucketsDrained(t, it, B)
	if got := p.bucketStocks(t, it, B); got[1] != 9 || got[2] != 10 {
		t.Errorf("bucket stocks %v, want bucket 1 at 9 (the order) and bucket 2 at 10 (given back)", got)
	}
	// u2's marker was freed: u2 can buy with a fresh requestId.
	if r := p.order(t, orderBody{RequestID: "fresh-u2", UserID: u2, ActivityID: 63, ItemID: 1, Quantity: 1}); r.Status != http.StatusAccepted {
		t.Errorf("u2 again: %d %v", r.Status, r.Body)
	}
	p.waitBucketsDrained(t, it, B)
	p.assertBucketInvariants(t, it, B)
}

// testBucketsMoverRefillsEmptyBucket: users of one bucket only buy; when
// their bucket is empty the mover brings units from the other, until every
// unit of the item is sold to them: nothing stays stranded.
func testBucketsMoverRefillsEmptyBucket(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, func(c *config) {
		c.Worker.MoveInterval = 20 * time.Millisecond
		c.Gateway.UserRPS = 0 // the same users retry until the mover has refilled their bucket
	})
	const B = 2
	it := p.mustBucketedSale(t, 64, 1, 10, B, 1)
	users := usersIn(0, B, 10, 1)
	sold := 0
	for _, u := range users {
		var r apiResponse
		testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("user %d's order accepted", u), func() bool {
			r = p.order(t, orderBody{RequestID: fmt.Sprintf("mv-%d", u), UserID: u, ActivityID: 64, ItemID: 1, Quantity: 1})
			if r.Status != http.StatusAccepted && r.Code() != "SOLD_OUT" && r.Code() != "RATE_LIMITED" {
				t.Fatalf("user %d: %d %v", u, r.Status, r.Body)
			}
			return r.Status == http.StatusAccepted
		})
		sold++
	}
	// Sold out in every bucket now.
	if r := p.order(t, orderBody{RequestID: "mv-last", UserID: usersIn(1, B, 1, 1)[0], ActivityID: 64, ItemID: 1, Quantity: 1}); r.Code() != "SOLD_OUT" {
		t.Errorf("after 10 units: %d %v, want SOLD_OUT", r.Status, r.Body)
	}
	p.waitBucketsDrained(t, it, B)
	if s := p.dbStock(t, it); sold != 10 || s.Stock != 0 {
		t.Errorf("sold %d, db stock %d; want all 10 sold to bucket 0's users", sold, s.Stock)
	}
	p.assertBucketInvariants(t, it, B)
}

// testBucketsReconcilerSumsAndFixes: the reconciler holds I5 to the sum over
// the buckets, counts units in transfer, and --fix restores each bucket
// from Postgres (a nudged bucket, a lost bucket).
func testBucketsReconcilerSumsAndFixes(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker"}, func(c *config) { c.Worker.MoveInterval = time.Hour })
	const B = 3
	it := p.mustBucketedSale(t, 65, 1, 30, B, 1)
	for u := int64(1); u <= 6; u++ {
		if r := p.order(t, orderBody{RequestID: fmt.Sprintf("rc-%d", u), UserID: u, ActivityID: 65, ItemID: 1, Quantity: 1}); r.Status != http.StatusAccepted {
			t.Fatalf("order: %d %v", r.Status, r.Body)
		}
	}
	p.waitBucketsDrained(t, it, B)
	code, _, r := p.reconcileJSON(t, it, "--once")
	if code != 0 || r.Buckets != B || r.DBStock != 24 || r.RedisStock == nil || *r.RedisStock != 24 {
		t.Fatalf("clean check: exit %d, %+v", code, r)
	}
	ctx := context.Background()
	b2 := stock.Item{ActivityID: 65, ItemID: 1, Bucket: 2}
	t.Run("NudgedBucket", func(t *testing.T) {
		stocktest.AddStock(t, p.StockRedis, b2, 4)
		if code, _, r := p.reconcileJSON(t, it, "--once"); code != 1 || r.Drift != 4 {
			t.Errorf("exit %d, drift %d; want 1, +4", code, r.Drift)
		}
		if code, out := p.reconcile(t, "--once", "--fix"); code != 0 {
			t.Errorf("fix: exit %d\n%s", code, out)
		}
		if got := p.bucketStocks(t, it, B); sum(got) != 24 {
			t.Errorf("after the fix: buckets %v, want 24 in all", got)
		}
	})
	t.Run("LostBucket", func(t *testing.T) {
		b1 := stock.Item{ActivityID: 65, ItemID: 1, Bucket: 1}
		stocktest.DropSale(t, p.StockRedis, b1)
		if code, _, r := p.reconcileJSON(t, it, "--once"); code != 1 || r.StockKey != "missing" || r.Sale != "missing" {
			t.Errorf("exit %d, %+v; want drift with stock and sale missing", code, r)
		}
		if code, out := p.reconcile(t, "--once", "--fix"); code != 0 {
			t.Errorf("fix: exit %d\n%s", code, out)
		}
		if got := p.bucketStocks(t, it, B); fmt.Sprint(got) != "[8 8 8]" {
			t.Errorf("after the fix: buckets %v, want the split of 24: [8 8 8]", got)
		}
		if v := stocktest.SaleField(t, p.StockRedis, b1, "buckets"); v != "3" {
			t.Errorf("restored sale's buckets %q", v)
		}
	})
	t.Run("UnitsInTransfer", func(t *testing.T) {
		// A mover that took 3 units from bucket 0 and died before giving.
		if err := p.Stock.WithBuckets(ctx, it, B, time.Second, func(ctx context.Context, fence int64) error {
			took, err := p.Stock.Take(ctx, it, stock.Transfer{ID: "t-1", From: 0, To: 2, Units: 3}, fence)
			if err == nil && !took {
				err = fmt.Errorf("not taken")
			}
			return err
		}); err != nil {
			t.Fatalf("take: %v", err)
		}
		code, _, r := p.reconcileJSON(t, it, "--once")
		if code != 0 || r.InTransit != 3 || r.Drift != 0 {
			t.Errorf("exit %d, in transit %d, drift %d; want 0, 3, 0", code, r.InTransit, r.Drift)
		}
		var moved int64
		err := p.Stock.WithBuckets(ctx, it, B, time.Second, func(ctx context.Context, fence int64) (err error) {
			moved, err = p.Stock.Move(ctx, it, B, fence)
			return err
		})
		if err != nil || moved != 0 {
			t.Fatalf("finishing the transfer: moved %d, %v", moved, err)
		}
		if got := p.bucketStocks(t, it, B); fmt.Sprint(got) != "[5 8 11]" {
			t.Errorf("after the transfer: buckets %v, want [5 8 11]", got)
		}
	})
	p.assertBucketInvariants(t, it, B)
	if code, out := p.reconcile(t, "--once"); code != 0 {
		t.Errorf("final check: exit %d\n%s", code, out)
	}
}

// testBucketsCloserReleasesIntoBucket: an unpaid order of a user of bucket
// b > 0 closes, and its units and the user's marker come back in bucket b.
func testBucketsCloserReleasesIntoBucket(t *testing.T, e engine) {
	t.Parallel()
	p := mustPipeline(t, e, components{"gateway", "worker", "closer"}, func(c *config) {
		fastCloser(c)
		c.Worker.MoveInterval = time.Hour
	})
	const B = 4
	it := p.mustBucketedSale(t, 66, 1, 20, B, 2)
	u := usersIn(3, B, 1, 1)[0]
	r := p.mustAccept(t, orderBody{RequestID: "cl-1", UserID: u, ActivityID: 66, ItemID: 1, Quantity: 2})
	if got := p.bucketStocks(t, it, B); got[3] != 3 {
		t.Fatalf("bucket 3 at %d after the order, want 3", got[3])
	}
	p.waitStatus(t, r.Str("orderNo"), order.StatusClosed)
	p.waitBucketsDrained(t, it, B)
	if got := p.bucketStocks(t, it, B); fmt.Sprint(got) != "[5 5 5 5]" {
		t.Errorf("bucket stocks after the close %v, want [5 5 5 5]", got)
	}
	if again := p.order(t, orderBody{RequestID: "cl-2", UserID: u, ActivityID: 66, ItemID: 1, Quantity: 2}); again.Status != http.StatusAccepted {
		t.Errorf("the same user after the close: %d %v", again.Status, again.Body)
	}
	testenv.WaitFor(t, 20*time.Second, "the second order CLOSED", func() bool {
		closed := 0
		for _, o := range p.snapshot(t, it.ActivityID).Orders {
			if o.Status == order.StatusClosed {
				closed++
			}
		}
		return closed == 2
	})
	p.waitBucketsDrained(t, it, B)
	p.assertBucketInvariants(t, it, B)
}
