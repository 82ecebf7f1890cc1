package stock_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

func TestBucketTagsAndRouting(t *testing.T) {
	t.Parallel()
	it := stock.Item{ActivityID: 7, ItemID: 9}
	if it.Tag() != "{a7:i9}" || it.ForUser(42, 1).Tag() != "{a7:i9}" {
		t.Errorf("one bucket: tag %s, want the plain {a7:i9}", it.Tag())
	}
	// One bucket keeps today's keys exactly.
	if k := stocktest.KeysOf(stocktest.On(nil, "p:"), it.ForUser(42, 1)); k.Stock != "p:stock:{a7:i9}" || k.Sale != "p:sale:{a7:i9}" {
		t.Errorf("one bucket's keys are %q and %q, want p:stock:{a7:i9} and p:sale:{a7:i9}", k.Stock, k.Sale)
	}
	b3 := stock.Item{ActivityID: 7, ItemID: 9, Bucket: 3}
	if b3.Tag() != "{a7:i9:b3}" || b3.String() != "7:9" || b3.Base() != it {
		t.Errorf("bucket 3: tag %s, key %s, base %v", b3.Tag(), b3.String(), b3.Base())
	}
	// FNV-1a 64 of the decimal digits (routing must never change): checked
	// against the standard library's.
	for _, u := range []int64{1, 42, 9_000_000_000_000_000_000, 31337} {
		for _, n := range []int{2, 3, 8, 64} {
			h := fnv.New64a()
			h.Write([]byte(strconv.FormatInt(u, 10)))
			if got, want := stock.BucketOf(u, n), int(h.Sum64()%uint64(n)); got != want {
				t.Errorf("BucketOf(%d, %d) = %d, want %d", u, n, got, want)
			}
		}
	}
	if stock.BucketOf(42, 1) != 0 || stock.BucketOf(42, 0) != 0 {
		t.Errorf("one bucket routes to bucket 0")
	}
	seen := map[int]int{}
	for u := int64(1); u <= 8000; u++ {
		b := stock.BucketOf(u, 8)
		if b != stock.BucketOf(u, 8) {
			t.Fatalf("user %d routed twice differently", u)
		}
		seen[b]++
	}
	for b := range 8 {
		if seen[b] < 800 || seen[b] > 1200 {
			t.Errorf("bucket %d got %d of 8000 users; want about 1000", b, seen[b])
		}
	}
	for _, tc := range []struct {
		s    int64
		b    int
		want string
	}{{10, 3, "[4 3 3]"}, {2, 4, "[1 1 0 0]"}, {0, 2, "[0 0]"}, {7, 1, "[7]"}} {
		if got := fmt.Sprint(stock.Split(tc.s, tc.b)); got != tc.want {
			t.Errorf("Split(%d, %d) = %s, want %s", tc.s, tc.b, got, tc.want)
		}
	}
}

// TestMoveFinishesAfterACrash: a transfer taken and never given (the mover
// died between the steps) is finished by the next Move, once; a give
// repeated after the record is gone changes nothing.
func TestMoveFinishesAfterACrash(t *testing.T) {
	t.Parallel()
	r, s, it := nineOverThree(t, 3, 4)
	ctx := context.Background()
	stocks := func() string { t.Helper(); return mustBucketStocks(t, s, it, 3) }
	// Each step as a mover takes it: under the item's bucket lock.
	held := func(fn func(fence int64) error) {
		t.Helper()
		if err := s.WithBuckets(ctx, it, 3, time.Second, func(_ context.Context, fence int64) error { return fn(fence) }); err != nil {
			t.Fatal(err)
		}
	}
	move := func() (moved int64) {
		t.Helper()
		held(func(fence int64) (err error) { moved, err = s.Move(ctx, it, 3, fence); return err })
		return moved
	}
	tr := stock.Transfer{ID: "x1", From: 0, To: 1, Units: 2}
	held(func(fence int64) error {
		for range 2 { // taking an id twice takes once
			if took, err := s.Take(ctx, it, tr, fence); err != nil || !took {
				t.Fatalf("take: %v %v", took, err)
			}
		}
		return nil
	})
	if got := stocks(); got != "[1 3 3]" {
		t.Fatalf("after the take: %s, want [1 3 3]", got)
	}
	ts, err := s.Transfers(ctx, it, 3)
	if err != nil || len(ts) != 1 || ts[0].Given || ts[0].Units != 2 || ts[0].To != 1 {
		t.Fatalf("transfers %+v, %v; want x1 pending", ts, err)
	}
	// The next pass finishes it; nothing is empty, so nothing new moves.
	if moved := move(); moved != 0 {
		t.Fatalf("move: %d", moved)
	}
	if got := stocks(); got != "[1 5 3]" {
		t.Errorf("after finishing: %s, want [1 5 3]", got)
	}
	held(func(fence int64) error { return s.Finish(ctx, it, tr, fence) })
	if got := stocks(); got != "[1 5 3]" {
		t.Errorf("after a repeated give: %s, want [1 5 3]", got)
	}
	if ts, _ := s.Transfers(ctx, it, 3); len(ts) != 0 {
		t.Errorf("records left: %+v", ts)
	}
	// Bucket 0 sells its last unit: half of the richest bucket not just
	// filled (bucket 1 is held) comes over.
	if err := r.Client.DecrBy(ctx, stocktest.KeysOf(stocktest.On(r.Client, r.Prefix), stock.Item{ActivityID: 3, ItemID: 4}).Stock, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if moved := move(); moved != 1 {
		t.Fatalf("move: %d, want 1 unit from bucket 2", moved)
	}
	if got := stocks(); got != "[1 5 2]" {
		t.Errorf("after the move: %s, want [1 5 2]", got)
	}
	if need, err := s.NeedsMove(ctx, it, 3); err != nil || need {
		t.Errorf("needs move: %v %v, want false", need, err)
	}
}

// mustBucketStocks is the stock of each of the item's n buckets, printed
// as [b0 b1 ...] so a test compares it with one string.
func mustBucketStocks(tb testing.TB, s *stock.Store, it stock.Item, n int) string {
	tb.Helper()
	got, err := s.BucketStocks(context.Background(), it, n)
	if err != nil {
		tb.Fatal(err)
	}
	out := []int64{}
	for _, n := range got {
		out = append(out, *n)
	}
	return fmt.Sprint(out)
}

// nineOverThree is a store of the test's own and item activity:item on
// sale for the hour, 9 units over 3 buckets, one per user.
func nineOverThree(t *testing.T, activity, item int64) (testenv.Redis, *stock.Store, stock.Item) {
	t.Helper()
	r, s := mustStore(t)
	it := stock.Item{ActivityID: activity, ItemID: item}
	mustPreheat(t, s, openSale(it, 9, 1, 3))
	return r, s, it
}

// TestLoadSellsNothingUntilArm: a preheat's Load gives every bucket its
// stock but no sale, so every bucket refuses NOT_ON_SALE and the item's
// bucket count is not known to a gateway yet; Arm puts every bucket on
// sale with the count. A repeated Load keeps the running stock.
func TestLoadSellsNothingUntilArm(t *testing.T) {
	t.Parallel()
	_, s := mustStore(t)
	ctx := context.Background()
	it := stock.Item{ActivityID: 5, ItemID: 6}
	sale := openSale(it, 9, 1, 3)
	reserve := func(user int64) stock.Outcome {
		t.Helper()
		rid := fmt.Sprintf("r-%d", user)
		res, err := s.Reserve(ctx, stock.Reservation{Item: it.ForUser(user, 3), RequestID: rid, OrderNo: "o-" + rid, UserID: user,
			Quantity: 1, Fingerprint: stock.Fingerprint(user, 5, 6, 1), Event: []byte(`{"orderNo":"o-` + rid + `","quantity":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		return res.Outcome
	}
	users := map[int]int64{}
	for u := int64(1); len(users) < 3; u++ {
		if _, ok := users[stock.BucketOf(u, 3)]; !ok {
			users[stock.BucketOf(u, 3)] = u
		}
	}
	if loaded, err := s.Load(ctx, sale); err != nil || !loaded {
		t.Fatalf("load: %v %v", loaded, err)
	}
	for b, u := range users {
		if got := reserve(u); got != stock.NotOnSale {
			t.Errorf("bucket %d after Load only: %s, want NOT_ON_SALE", b, got)
		}
	}
	if _, known, err := s.Buckets(ctx, it); err != nil || known {
		t.Errorf("bucket count known after Load only: %v %v", known, err)
	}
	if err := s.Arm(ctx, sale); err != nil {
		t.Fatal(err)
	}
	if n, known, err := s.Buckets(ctx, it); err != nil || !known || n != 3 {
		t.Errorf("bucket count after Arm: %d %v %v, want 3", n, known, err)
	}
	for b, u := range users {
		if got := reserve(u); got != stock.Reserved {
			t.Errorf("bucket %d after Arm: %s, want RESERVED", b, got)
		}
	}
	if loaded, err := s.Load(ctx, sale); err != nil || loaded {
		t.Fatalf("second load: %v %v, want nothing loaded", loaded, err)
	}
	got, err := s.BucketStocks(ctx, it, 3)
	if err != nil {
		t.Fatal(err)
	}
	for b, n := range got {
		if n == nil || *n != 2 {
			t.Errorf("bucket %d holds %v after a sale and a second Load, want 2", b, n)
		}
	}
}

// TestReserveRoutedByAnotherCount: a gateway that read the item's bucket
// count before the sale was armed routes every user as one bucket, to
// bucket 0. Once bucket 0 is on sale with 3 buckets, such a reserve changes
// nothing and answers the count (WrongBuckets), so the caller routes again;
// it would otherwise take a unit and set the limit marker of a user of
// another bucket in bucket 0, where the per-user limit and the reconciler
// do not look. A reserve routed by the right count goes through, and one
// that names its bucket itself (Buckets 0) is not checked.
func TestReserveRoutedByAnotherCount(t *testing.T) {
	t.Parallel()
	r, s, it := nineOverThree(t, 5, 7)
	ctx := context.Background()
	user := int64(1)
	for stock.BucketOf(user, 3) == 0 {
		user++
	}
	reserve := func(bucket, routedBy int, rid string) stock.ReserveResult {
		t.Helper()
		b := it
		b.Bucket = bucket
		res, err := s.Reserve(ctx, stock.Reservation{Item: b, RequestID: rid, OrderNo: "o-" + rid, UserID: user, Quantity: 1,
			Fingerprint: stock.Fingerprint(user, 5, 7, 1), Event: []byte(`{"orderNo":"o-` + rid + `","quantity":1}`), Buckets: routedBy})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := reserve(0, 1, "r1"); res.Outcome != stock.WrongBuckets || res.Remaining != 3 {
		t.Fatalf("routed as one bucket: %s %d, want WRONG_BUCKETS 3", res.Outcome, res.Remaining)
	}
	k := stocktest.KeysOf(stocktest.On(r.Client, r.Prefix), it)
	if left, _ := r.Client.Get(ctx, k.Stock).Int64(); left != 3 {
		t.Errorf("bucket 0 holds %d after the refused reserve, want 3", left)
	}
	for _, key := range []string{k.Limit(user), k.Req("r1")} {
		if n, _ := r.Client.Exists(ctx, key).Result(); n != 0 {
			t.Errorf("%s written by the refused reserve", key)
		}
	}
	if n, _ := r.Client.HLen(ctx, k.Journal).Result(); n != 0 {
		t.Errorf("bucket 0's journal holds %d entries after the refused reserve", n)
	}
	if res := reserve(stock.BucketOf(user, 3), 3, "r1"); res.Outcome != stock.Reserved {
		t.Errorf("routed by the sale's count: %s, want RESERVED", res.Outcome)
	}
	user++ // another user, in whatever bucket: a caller naming the bucket is not checked
	if res := reserve(0, 0, "r2"); res.Outcome != stock.Reserved {
		t.Errorf("bucket named by the caller: %s, want RESERVED", res.Outcome)
	}
}

// roundTrips counts the calls and pipelines a client sends, but for the
// set-up of a new connection (HELLO, CLIENT SETINFO).
type roundTrips struct{ n atomic.Int64 }

func setUp(cmd redis.Cmder) bool { return cmd.Name() == "hello" || cmd.Name() == "client" }

func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setUp(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !setUp(cmds[0]) {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestArmAllAndEndInFewRoundTrips: a preheat arms all its items while the
// kill switch waits for it, and the kill switch ends them all while they
// may still sell, so ArmAll puts any number of items and buckets on sale in
// two round trips (every bucket b > 0, then every bucket 0), each sale hash
// with its window, cap, count and expiry, and End ends them all in one.
func TestArmAllAndEndInFewRoundTrips(t *testing.T) {
	t.Parallel()
	r := testenv.MustRedis(t)
	client := testenv.RedisClient(t, testenv.RedisAddr(), time.Second)
	calls := &roundTrips{}
	client.AddHook(calls)
	s := stock.New(client, r.Prefix)
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	var sales []stock.Sale
	for i := range 40 {
		sales = append(sales, stock.Sale{Item: stock.Item{ActivityID: 8, ItemID: int64(i + 1)}, Stock: 9,
			StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Cap: 2, Buckets: 1 + i%4})
	}
	// Once first, so the scripts are loaded (a fresh Redis costs a load
	// and a second send of the first pipeline).
	if err := s.ArmAll(ctx, sales[:2]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.End(ctx, []stock.Sale{{Item: stock.Item{ActivityID: 8, ItemID: 999}}}, now); err != nil {
		t.Fatal(err)
	}
	calls.n.Store(0)
	if err := s.ArmAll(ctx, sales); err != nil {
		t.Fatal(err)
	}
	if got, want := calls.n.Load(), int64(stock.ScriptRoundTrips(sales)); got != 2 || want != 2 {
		t.Errorf("ArmAll of 40 items (100 buckets) took %d round trips (ScriptRoundTrips says %d), want 2", got, want)
	}
	for _, sale := range sales {
		if n, known, err := s.Buckets(ctx, sale.Item); err != nil || !known || n != max(sale.Buckets, 1) {
			t.Errorf("item %d: bucket count %d %v %v, want %d", sale.ItemID, n, known, err, sale.Buckets)
		}
		for b := range sale.Buckets {
			it := sale.Item
			it.Bucket = b
			k := stocktest.KeysOf(stocktest.On(r.Client, r.Prefix), it)
			v, err := r.Client.HGetAll(ctx, k.Sale).Result()
			if err != nil || v["starts"] != strconv.FormatInt(sale.StartsAt.UnixMilli(), 10) ||
				v["ends"] != strconv.FormatInt(sale.EndsAt.UnixMilli(), 10) || v["cap"] != "2" {
				t.Errorf("item %d bucket %d: sale %v %v", sale.ItemID, b, v, err)
			}
			if at, err := r.Client.ExpireTime(ctx, k.Sale).Result(); err != nil || at != time.Duration(sale.EndsAt.Add(stock.StockGrace).Unix())*time.Second {
				t.Errorf("item %d bucket %d: sale expires at %v %v, want the end + %v", sale.ItemID, b, at, err, stock.StockGrace)
			}
		}
	}

	calls.n.Store(0)
	at := now.Add(-time.Second) // in the window, before Redis's now
	ends, ok, err := s.End(ctx, sales, at)
	if err != nil || !ok || !ends.Equal(at) {
		t.Fatalf("End: %v %v %v, want %v", ends, ok, err, at)
	}
	if got := calls.n.Load(); got != 1 {
		t.Errorf("End of 40 items (100 buckets) took %d round trips, want 1", got)
	}
	for _, sale := range sales {
		for b := range sale.Buckets {
			it := sale.Item
			it.Bucket = b
			if v, _ := r.Client.HGet(ctx, stocktest.KeysOf(stocktest.On(r.Client, r.Prefix), it).Sale, "ends").Result(); v != strconv.FormatInt(at.UnixMilli(), 10) {
				t.Errorf("item %d bucket %d ends at %s after End, want %d", sale.ItemID, b, v, at.UnixMilli())
			}
		}
	}
	if n := stock.ScriptRoundTrips([]stock.Sale{{Buckets: 64}, {Buckets: 64}}); n != 2 {
		t.Errorf("ScriptRoundTrips of 2 items × 64 buckets = %d, want 2", n)
	}
	many := make([]stock.Sale, 1000)
	for i := range many {
		many[i].Buckets = 64
	}
	if n := stock.ScriptRoundTrips(many); n != 64 {
		t.Errorf("ScriptRoundTrips of 1000 items × 64 buckets = %d, want 63 + 1", n)
	}
}
