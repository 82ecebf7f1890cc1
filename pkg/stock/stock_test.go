package stock_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

type fixture struct {
	s    *stock.Store
	r    testenv.Redis
	sr   stocktest.Redis // s's client and prefix
	item stock.Item
	keys stocktest.Keys
}

// mustStore is a store whose key prefix is the test's own.
func mustStore(tb testing.TB) (testenv.Redis, *stock.Store) {
	tb.Helper()
	r := testenv.MustRedis(tb)
	return r, stock.New(r.Client, r.Prefix)
}

// openSale is a sale of it that opened a minute ago and lasts the hour.
func openSale(it stock.Item, units int64, cap, buckets int) stock.Sale {
	now := time.Now()
	return stock.Sale{Item: it, Stock: units, StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Cap: cap, Buckets: buckets}
}

func mustPreheat(tb testing.TB, s *stock.Store, sale stock.Sale) {
	tb.Helper()
	if _, err := s.Preheat(context.Background(), sale); err != nil {
		tb.Fatal(err)
	}
}

func mustFixture(t *testing.T, units int64, cap int) fixture {
	t.Helper()
	r, s := mustStore(t)
	it := stock.Item{ActivityID: 1, ItemID: 2}
	mustPreheat(t, s, openSale(it, units, cap, 0))
	sr := stocktest.On(r.Client, r.Prefix)
	return fixture{s: s, r: r, sr: sr, item: it, keys: stocktest.KeysOf(sr, it)}
}

func (f fixture) reserve(t *testing.T, rid, orderNo string, user int64, q int, fp string) stock.ReserveResult {
	t.Helper()
	ev := `{"requestId":"` + rid + `","orderNo":"` + orderNo + `"}`
	res, err := f.s.Reserve(context.Background(), stock.Reservation{Item: f.item, RequestID: rid, OrderNo: orderNo, UserID: user,
		Quantity: q, Fingerprint: fp, Event: []byte(ev)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (f fixture) markPublished(t *testing.T, rid, orderNo string) {
	t.Helper()
	if n, err := f.s.MarkPublished(context.Background(), f.item, []stock.Ref{{RequestID: rid, OrderNo: orderNo}}); err != nil || n != 1 {
		t.Fatalf("marking %s published: %d %v", orderNo, n, err)
	}
}

// release is the release of user's one-unit reservation rid (orderNo) of the item.
func (f fixture) release(rid, orderNo string, user int64) stock.Release {
	return stock.Release{Item: f.item, Ref: stock.Ref{RequestID: rid, OrderNo: orderNo}, UserID: user, Quantity: 1}
}

// mustRelease releases rel for cause; the test stops unless it answers want.
func (f fixture) mustRelease(t *testing.T, step string, cause stock.Cause, rel stock.Release, want stock.ReleaseOutcome) {
	t.Helper()
	if out, err := f.s.Release(context.Background(), cause, rel); err != nil || out != want {
		t.Fatalf("%s: %s %v, want %s", step, out, err, want)
	}
}

func (f fixture) stock(t *testing.T) int64 {
	t.Helper()
	n, err := f.r.Client.Get(context.Background(), f.keys.Stock).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReserveOutcomes(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 3, 2)
	steps := []struct {
		rid, orderNo string
		user         int64
		q            int
		fp           string
		want         stock.Outcome
		wantOrderNo  string
		remaining    int64
	}{
		{"r1", "o1", 1, 2, "fp1", stock.Reserved, "o1", 1},
		{"r1", "o-other", 1, 2, "fp1", stock.Replayed, "o1", 1},
		{"r1", "o-other", 1, 1, "fp-other", stock.IdempotencyKeyReused, "o1", 0},
		{"r2", "o2", 1, 1, "fp2", stock.AlreadyPurchased, "", 1},
		{"r3", "o3", 2, 3, "fp3", stock.OverCap, "", 2},
		{"r4", "o4", 3, 2, "fp4", stock.SoldOut, "", 1},
		{"r5", "o5", 3, 1, "fp5", stock.Reserved, "o5", 0},
		{"r6", "o6", 4, 1, "fp6", stock.SoldOut, "", 0},
		// Sold out since, but a replay is the first answer, remaining included.
		{"r1", "o-late", 1, 2, "fp1", stock.Replayed, "o1", 1},
	}
	for _, s := range steps {
		res := f.reserve(t, s.rid, s.orderNo, s.user, s.q, s.fp)
		if res.Outcome == stock.Reserved {
			// Produced: a retry may be shown its orderNo.
			f.markPublished(t, s.rid, s.orderNo)
		}
		if res.Outcome != s.want || res.OrderNo != s.wantOrderNo || res.Remaining != s.remaining {
			t.Errorf("%s user %d q %d: got %+v, want %s %q %d", s.rid, s.user, s.q, res, s.want, s.wantOrderNo, s.remaining)
		}
	}
	// A sold-out answer did not take user 4's chance: no marker.
	if f.r.Client.Exists(context.Background(), f.keys.Limit(4)).Val() != 0 {
		t.Error("sold-out user got a limit marker")
	}
	if n := f.r.Client.HLen(context.Background(), f.keys.Journal).Val(); n != 2 {
		t.Errorf("journal holds %d entries, want 2", n)
	}
	// Replays and the redrive need the dedup record, the order index and the
	// journal for at least a day (the contract: ≥ 24 h).
	for _, k := range []string{f.keys.Req("r1"), f.keys.Order("o1"), f.keys.Journal} {
		if ttl := f.r.Client.TTL(context.Background(), k).Val(); ttl < stock.DedupLifetime-time.Minute {
			t.Errorf("%s lives %v, want ≥ %v", k, ttl, stock.DedupLifetime)
		}
	}
}

func TestNotOnSale(t *testing.T) {
	t.Parallel()
	f := mustFixture(t, 3, 1)
	other := stock.Item{ActivityID: 1, ItemID: 3}
	res, err := f.s.Reserve(context.Background(), stock.Reservation{Item: other, RequestID: "r", OrderNo: "o", UserID: 1, Quantity: 1,
		Fingerprint: "f", Event: []byte(`{}`)})
	if err != nil || res.Outcome != stock.NotOnSale || res.OutsideWindow {
		t.Errorf("unpreheated item: %+v %v", res, err)
	}
	// The window goes by Redis's clock (the script reads TIME), not the
	// caller's: a sale that starts in an hour is not on sale, whatever
	// the gateway's clock says.
	later := stock.Item{ActivityID: 1, ItemID: 4}
	now := time.Now()
	if _, err := f.s.Preheat(context.Background(), stock.Sale{Item: later, Stock: 3, StartsAt: now.Add(time.Hour), EndsAt: now.Add(2 * time.Hour), Cap: 1}); err != nil {
		t.Fatal(err)
	}
	res, err = f.s.Reserve(context.Background(), stock.Reservation{Item: later, RequestID: "r", OrderNo: "o", UserID: 1, Quantity: 1,
		Fingerprint: "f", Event: []byte(`{}`)})
	if err != nil || res.Outcome != stock.NotOnSale || !res.OutsideWindow || res.OrderNo != "" {
		t.Errorf("before the sale: %+v %v", res, err)
	}
	if got := f.r.Client.Get(context.Background(), stocktest.KeysOf(f.sr, later).Stock).Val(); got != "3" {
		t.Errorf("stock of the later sale %s, want 3", got)
	}
	stocktest.WantStock(t, f.sr, f.item, 3, "unchanged")
}

func TestAbortReleasesUnlessClaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("Unclaimed", func(t *testing.T) {
		f := mustFixture(t, 5, 1)
		f.reserve(t, "r", "o1", 1, 1, "fp")
		rel := f.release("r", "o1", 1)
		f.mustRelease(t, "abort", stock.Unproduced, rel, stock.Released)
		if f.stock(t) != 5 || f.r.Client.Exists(ctx, f.keys.Limit(1), f.keys.Req("r"), f.keys.Order("o1")).Val() != 0 ||
			f.r.Client.HLen(ctx, f.keys.Journal).Val() != 0 {
			t.Fatal("abort left the reservation behind")
		}
		if out, _ := f.s.Release(ctx, stock.Unproduced, rel); out != stock.AlreadyReleased {
			t.Errorf("second abort: %s", out)
		}
		stocktest.WantStock(t, f.sr, f.item, 5, "a second abort gives nothing back")
		// The aborted event arrives late: the worker sees a ghost.
		claims, err := f.s.Claim(ctx, f.item, []stock.Ref{{RequestID: "r", OrderNo: "o1"}})
		if err != nil || claims[0] != stock.ClaimReleased {
			t.Errorf("claim after abort: %v %v", claims, err)
		}
		// The client's retry with the same requestId starts afresh.
		if res := f.reserve(t, "r", "o2", 1, 1, "fp"); res.Outcome != stock.Reserved || res.OrderNo != "o2" {
			t.Errorf("retry after abort: %+v", res)
		}
		claims, _ = f.s.Claim(ctx, f.item, []stock.Ref{{RequestID: "r", OrderNo: "o2"}})
		if claims[0] != stock.ClaimOK {
			t.Errorf("claim of the retry: %v", claims)
		}
	})
	t.Run("Claimed", func(t *testing.T) {
		f := mustFixture(t, 5, 1)
		f.reserve(t, "r", "o1", 1, 1, "fp")
		claims, err := f.s.Claim(ctx, f.item, []stock.Ref{{RequestID: "r", OrderNo: "o1"}, {RequestID: "x", OrderNo: "ox"}})
		if err != nil || claims[0] != stock.ClaimOK || claims[1] != stock.ClaimUnknown {
			t.Fatalf("claim: %v %v", claims, err)
		}
		f.mustRelease(t, "abort of a claimed reservation", stock.Unproduced, f.release("r", "o1", 1), stock.Claimed)
		if f.stock(t) != 4 || f.r.Client.Exists(ctx, f.keys.Limit(1)).Val() != 1 {
			t.Error("abort released a claimed reservation")
		}
	})
	// The gateway waits on its produce past the order's whole life: a
	// worker claims it, Postgres decides it, the closer (or the buyer's
	// cancel) gives it back. The abort that follows must not say "nothing
	// was reserved": the orderNo resolves to that order.
	t.Run("ClaimedThenCompensated", func(t *testing.T) {
		f := mustFixture(t, 5, 1)
		f.reserve(t, "r", "o1", 1, 1, "fp")
		rel := f.release("r", "o1", 1)
		if claims, err := f.s.Claim(ctx, f.item, []stock.Ref{rel.Ref}); err != nil || claims[0] != stock.ClaimOK {
			t.Fatalf("claim: %v %v", claims, err)
		}
		f.mustRelease(t, "compensation", stock.Compensation, rel, stock.Released)
		f.mustRelease(t, "abort after the compensation", stock.Unproduced, rel, stock.Claimed)
		stocktest.WantStock(t, f.sr, f.item, 5, "given back once")
		if res := f.reserve(t, "r", "o2", 1, 1, "fp"); res.Outcome != stock.Replayed || res.OrderNo != "o1" {
			t.Errorf("retry after the abort: %+v, want the replay of o1", res)
		}
	})
}

// TestLateReserveAfterAbortChangesNothing: a reserve call that reaches
// Redis after the gateway gave its orderNo back (a delayed or resent copy)
// takes nothing, whether the abort released it or found nothing to release.
func TestLateReserveAfterAbortChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 5, 1)
	nothingHeld := func(what string) {
		t.Helper()
		if f.stock(t) != 5 || f.r.Client.Exists(ctx, f.keys.Limit(1), f.keys.Req("r"), f.keys.Order("o1"), f.keys.Order("o2")).Val() != 0 ||
			f.r.Client.HLen(ctx, f.keys.Journal).Val() != 0 {
			t.Fatalf("%s: stock %d, or a marker, dedup record or journal entry left", what, f.stock(t))
		}
	}
	// Released, then the same call runs again.
	f.reserve(t, "r", "o1", 1, 1, "fp")
	f.mustRelease(t, "abort", stock.Unproduced, f.release("r", "o1", 1), stock.Released)
	if res := f.reserve(t, "r", "o1", 1, 1, "fp"); res.Outcome != stock.ReleasedBefore {
		t.Fatalf("late copy of an aborted reserve: %+v, want ABORTED", res)
	}
	nothingHeld("late copy after a release")
	// The abort ran first and found nothing; the reserve arrives after it.
	f.mustRelease(t, "abort of a reserve that has not run", stock.Unproduced, f.release("r", "o2", 1), stock.NotReserved)
	if res := f.reserve(t, "r", "o2", 1, 1, "fp"); res.Outcome != stock.ReleasedBefore {
		t.Fatalf("reserve after its abort: %+v, want ABORTED", res)
	}
	nothingHeld("reserve after its abort")
	// The client's retry (a new orderNo) is served as usual.
	if res := f.reserve(t, "r", "o3", 1, 1, "fp"); res.Outcome != stock.Reserved {
		t.Fatalf("retry: %+v", res)
	}
}

func TestCompensateOnceAndAckMatchesOrderNo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 5, 1)
	f.reserve(t, "a", "oa", 1, 1, "fp")
	f.reserve(t, "b", "ob", 2, 1, "fp")
	if n, err := f.s.Ack(ctx, f.item, []stock.Ref{{RequestID: "a", OrderNo: "wrong"}}); err != nil || n != 0 {
		t.Errorf("ack with another orderNo dropped %d (%v)", n, err)
	}
	if n, err := f.s.Ack(ctx, f.item, []stock.Ref{{RequestID: "a", OrderNo: "oa"}}); err != nil || n != 1 {
		t.Errorf("ack dropped %d (%v)", n, err)
	}
	rel := f.release("b", "ob", 2)
	for i, want := range []stock.ReleaseOutcome{stock.Released, stock.AlreadyReleased, stock.AlreadyReleased} {
		if out, err := f.s.Release(ctx, stock.Compensation, rel); err != nil || out != want {
			t.Errorf("compensate #%d: %s %v", i, out, err)
		}
	}
	stocktest.WantStock(t, f.sr, f.item, 4, "")
	// The dedup record survives a compensation: a replay still answers.
	if res := f.reserve(t, "b", "ob2", 2, 1, "fp"); res.Outcome != stock.Replayed || res.OrderNo != "ob" {
		t.Errorf("replay after compensation: %+v", res)
	}
	// The marker is handed over, not freed, when a limit owner is given.
	f.reserve(t, "c", "oc", 3, 1, "fp")
	handed := f.release("c", "oc", 3)
	handed.LimitOwner = "live"
	if _, err := f.s.Release(ctx, stock.Compensation, handed); err != nil {
		t.Fatal(err)
	}
	if v := f.r.Client.Get(ctx, f.keys.Limit(3)).Val(); v != "live" {
		t.Errorf("marker %q, want handed to live", v)
	}
}

func TestPreheatDoesNotOverwriteRunningStock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 5, 1)
	f.reserve(t, "a", "oa", 1, 1, "fp")
	now := time.Now()
	loaded, err := f.s.Preheat(ctx, openSale(f.item, 5, 1, 0))
	if err != nil || loaded || f.stock(t) != 4 {
		t.Errorf("second preheat: loaded=%v err=%v stock=%d", loaded, err, f.stock(t))
	}
	if _, err := f.s.Preheat(ctx, stock.Sale{Item: stock.Item{ActivityID: 9, ItemID: 9}, Stock: 1, StartsAt: now.Add(-3 * time.Hour),
		EndsAt: now.Add(-2 * time.Hour), Cap: 1}); err != stock.ErrSaleOver {
		t.Errorf("preheating an ended sale: %v", err)
	}
}

// TestEveryAbortedReservationStaysReleased: a requestId whose produce failed
// twice has two aborted reservations; a late event of the first must still
// be recognised as a ghost after the second abort and a third, successful
// reservation.
func TestEveryAbortedReservationStaysReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 5, 1)
	f.reserve(t, "r", "A", 1, 1, "fp")
	f.mustRelease(t, "abort A", stock.Unproduced, f.release("r", "A", 1), stock.Released)
	f.reserve(t, "r", "A2", 1, 1, "fp")
	f.mustRelease(t, "abort A2", stock.Unproduced, f.release("r", "A2", 1), stock.Released)
	f.reserve(t, "r", "B", 1, 1, "fp")
	claims, err := f.s.Claim(ctx, f.item, []stock.Ref{{RequestID: "r", OrderNo: "A"}, {RequestID: "r", OrderNo: "A2"}, {RequestID: "r", OrderNo: "B"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []stock.ClaimStatus{stock.ClaimReleased, stock.ClaimReleased, stock.ClaimOK}
	for i := range want {
		if claims[i] != want[i] {
			t.Errorf("claim #%d: %s, want %s", i, claims[i], want[i])
		}
	}
	stocktest.WantStock(t, f.sr, f.item, 4, "only B holds a unit")
}

// TestCompensationKeepsTheDedupRecord: a compensated reservation was shown
// to its client and is decided in Postgres (an order later closed, or a
// REJECTED record), so its dedup record stays and a replay names it again;
// only an abort forgets it.
func TestCompensationKeepsTheDedupRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 5, 1)
	f.reserve(t, "kept", "ok", 1, 1, "fp")
	f.reserve(t, "gone", "og", 2, 1, "fp")
	if _, err := f.s.Release(ctx, stock.Compensation, f.release("kept", "ok", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Release(ctx, stock.Unproduced, f.release("gone", "og", 2)); err != nil {
		t.Fatal(err)
	}
	if f.r.Client.Exists(ctx, f.keys.Req("kept"), f.keys.Order("ok")).Val() != 2 {
		t.Error("a compensation dropped the dedup record")
	}
	if f.r.Client.Exists(ctx, f.keys.Req("gone"), f.keys.Order("og")).Val() != 0 {
		t.Error("an abort left the dedup record")
	}
	stocktest.WantStock(t, f.sr, f.item, 5, "")
}

func TestRestoreDedupKeepsExistingRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 5, 1)
	f.reserve(t, "live", "o-live", 1, 1, "fp-live")
	f.markPublished(t, "live", "o-live")
	n, err := f.s.RestoreDedup(ctx, f.item, []stock.Decided{
		{RequestID: "live", OrderNo: "other", Fingerprint: "x", Event: []byte(`{}`)},
		{RequestID: "lost", OrderNo: "o-lost", Fingerprint: "fp-lost", Event: []byte(`{"orderNo":"o-lost"}`)},
	}, 4)
	if err != nil || n != 1 {
		t.Fatalf("restored %d (%v), want 1", n, err)
	}
	if res := f.reserve(t, "live", "new", 1, 1, "fp-live"); res.Outcome != stock.Replayed || res.OrderNo != "o-live" {
		t.Errorf("existing record was overwritten: %+v", res)
	}
	if res := f.reserve(t, "lost", "new2", 2, 1, "fp-lost"); res.Outcome != stock.Replayed || res.OrderNo != "o-lost" || res.Remaining != 4 {
		t.Errorf("restored record does not replay: %+v", res)
	}
	// Restored records live the dedup lifetime by Redis's clock (a TTL,
	// not an instant of the reconciler host's clock).
	for _, k := range []string{f.keys.Req("lost"), f.keys.Order("o-lost")} {
		if ttl := f.r.Client.TTL(ctx, k).Val(); ttl < stock.DedupLifetime-time.Minute || ttl > stock.DedupLifetime {
			t.Errorf("%s lives %v, want %v", k, ttl, stock.DedupLifetime)
		}
	}
}

// TestAbortGivesBackOnlyWhatWasReserved: an abort after a reserve whose
// reply was lost must not create stock when the reserve never ran.
func TestAbortGivesBackOnlyWhatWasReserved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 5, 1)
	f.mustRelease(t, "abort of a reserve that never ran", stock.Unproduced, f.release("never", "o-never", 1), stock.NotReserved)
	// Nothing given back; only the fate key remembers the orderNo, so that
	// its reserve, should it still arrive, takes nothing.
	if fate := f.r.Client.Get(ctx, f.keys.Fate("o-never")).Val(); f.stock(t) != 5 || fate != "released:o-never" ||
		f.r.Client.Exists(ctx, f.keys.Limit(1), f.keys.Req("never")).Val() != 0 {
		t.Errorf("abort of nothing: stock %d, fate %q, or a marker or dedup record appeared", f.stock(t), fate)
	}
	// A reserve that did run (its reply lost) is given back.
	f.reserve(t, "ran", "o-ran", 1, 1, "fp")
	f.mustRelease(t, "abort of a reserve that ran", stock.Unproduced, f.release("ran", "o-ran", 1), stock.Released)
	stocktest.WantStock(t, f.sr, f.item, 5, "")
}

// TestFingerprintIsStable: dedup records written by earlier releases hold
// fingerprints of "<user>|<activity>|<item>|<quantity>"; a retry must still
// match them.
func TestFingerprintIsStable(t *testing.T) {
	t.Parallel()
	for _, c := range [][4]int64{{1, 1, 1, 1}, {1 << 40, 1795949354781, 7, 100}, {-5, 0, 9223372036854775807, -1}} {
		h := sha256.Sum256([]byte(fmt.Sprintf("%d|%d|%d|%d", c[0], c[1], c[2], c[3])))
		if got, want := stock.Fingerprint(c[0], c[1], c[2], int(c[3])), hex.EncodeToString(h[:12]); got != want {
			t.Errorf("Fingerprint%v = %s, want %s", c, got, want)
		}
	}
	if got := stock.Fingerprint(7, 1, 2, 1); got != "6fe6218db5d394f94e51487c" {
		t.Errorf("Fingerprint(7,1,2,1) = %s: the stored format changed", got)
	}
}

// TestAbortKeepsAShownReservation: a retry (another attempt, another
// orderNo) was answered 200 replayed with the first attempt's orderNo, so
// the first attempt's abort must not give it back: it answers SHOWN and the
// journal entry stays for the redrive. A second run of the same attempt
// (same orderNo) shows nothing, and its abort still releases.
func TestAbortKeepsAShownReservation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 5, 1)
	abort := func(rid, no string, user int64) stock.ReleaseOutcome {
		t.Helper()
		out, err := f.s.Release(ctx, stock.Unproduced, f.release(rid, no, user))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	f.reserve(t, "shown", "o-first", 1, 1, "fp")
	// Durable (e.g. the redrive re-published it while the first attempt's
	// own produce was still failing).
	f.markPublished(t, "shown", "o-first")
	if r := f.reserve(t, "shown", "o-retry", 1, 1, "fp"); r.Outcome != stock.Replayed || r.OrderNo != "o-first" {
		t.Fatalf("retry: %+v", r)
	}
	if out := abort("shown", "o-first", 1); out != stock.Shown {
		t.Errorf("abort of a shown reservation: %s, want %s", out, stock.Shown)
	}
	if f.stock(t) != 4 || f.r.Client.HExists(ctx, f.keys.Journal, "shown").Val() != true {
		t.Errorf("shown reservation given back: stock %d, journaled %v", f.stock(t), f.r.Client.HExists(ctx, f.keys.Journal, "shown").Val())
	}
	if r := f.reserve(t, "shown", "o-later", 1, 1, "fp"); r.Outcome != stock.Replayed || r.OrderNo != "o-first" {
		t.Errorf("a later retry: %+v, want a replay of o-first", r)
	}

	f.reserve(t, "unseen", "o-2", 2, 1, "fp")
	if r := f.reserve(t, "unseen", "o-2", 2, 1, "fp"); r.Outcome != stock.Replayed {
		t.Fatalf("second run of the same attempt: %+v", r)
	}
	if out := abort("unseen", "o-2", 2); out != stock.Released {
		t.Errorf("abort of an unseen reservation: %s, want %s", out, stock.Released)
	}
	stocktest.WantStock(t, f.sr, f.item, 4, "only the shown reservation holds a unit")
}

// TestReplayShowsOnlyADurableOrderNo: a retry (another attempt) is shown the
// first attempt's orderNo only once its event is durable — published (the
// produce was acked), claimed by a worker, or acked out of the journal —
// and until then is answered IN_PROGRESS, changing nothing: no stock taken,
// no "shown" mark, so a failed produce still gives the reservation back.
func TestReplayShowsOnlyADurableOrderNo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 10, 1)
	inProgress := func(rid, retryNo string, user int64) {
		t.Helper()
		if r := f.reserve(t, rid, retryNo, user, 1, "fp"); r.Outcome != stock.InProgress || r.OrderNo != "" {
			t.Fatalf("retry of %s before it is durable: %+v, want IN_PROGRESS without an orderNo", rid, r)
		}
		if f.r.Client.HExists(ctx, f.keys.Req(rid), "shown").Val() {
			t.Fatalf("%s marked shown by a retry that showed nothing", rid)
		}
	}
	replayed := func(rid, retryNo, want string, user int64) {
		t.Helper()
		if r := f.reserve(t, rid, retryNo, user, 1, "fp"); r.Outcome != stock.Replayed || r.OrderNo != want {
			t.Fatalf("retry of %s once durable: %+v, want a replay of %s", rid, r, want)
		}
	}

	t.Run("Published", func(t *testing.T) {
		f.reserve(t, "pub", "o-pub", 1, 1, "fp")
		inProgress("pub", "o-pub-2", 1)
		// A mark for another orderNo of the requestId is no mark.
		if n, err := f.s.MarkPublished(ctx, f.item, []stock.Ref{{RequestID: "pub", OrderNo: "o-other"}}); err != nil || n != 0 {
			t.Fatalf("mark of another orderNo: %d %v", n, err)
		}
		inProgress("pub", "o-pub-3", 1)
		f.markPublished(t, "pub", "o-pub")
		replayed("pub", "o-pub-4", "o-pub", 1)
		if !f.r.Client.HExists(ctx, f.keys.Req("pub"), "shown").Val() {
			t.Error("a replay that showed the orderNo did not mark it shown")
		}
	})
	t.Run("Claimed", func(t *testing.T) {
		f.reserve(t, "cl", "o-cl", 2, 1, "fp")
		inProgress("cl", "o-cl-2", 2)
		if st, err := f.s.Claim(ctx, f.item, []stock.Ref{{RequestID: "cl", OrderNo: "o-cl"}}); err != nil || st[0] != stock.ClaimOK {
			t.Fatalf("claim: %v %v", st, err)
		}
		replayed("cl", "o-cl-3", "o-cl", 2)
	})
	t.Run("Acked", func(t *testing.T) {
		f.reserve(t, "ack", "o-ack", 3, 1, "fp")
		inProgress("ack", "o-ack-2", 3)
		if n, err := f.s.Ack(ctx, f.item, []stock.Ref{{RequestID: "ack", OrderNo: "o-ack"}}); err != nil || n != 1 {
			t.Fatalf("ack: %d %v", n, err)
		}
		replayed("ack", "o-ack-3", "o-ack", 3)
	})
	t.Run("AbortedAfterAWaitingRetry", func(t *testing.T) {
		f.reserve(t, "ab", "o-ab", 4, 1, "fp")
		before := f.stock(t)
		inProgress("ab", "o-ab-2", 4)
		if f.stock(t) != before {
			t.Fatalf("a waiting retry took stock: %d, was %d", f.stock(t), before)
		}
		f.mustRelease(t, "abort after a retry that showed nothing", stock.Unproduced, f.release("ab", "o-ab", 4), stock.Released)
		if r := f.reserve(t, "ab", "o-ab-3", 4, 1, "fp"); r.Outcome != stock.Reserved || r.OrderNo != "o-ab-3" {
			t.Fatalf("retry after the abort: %+v, want a new reservation", r)
		}
		stocktest.WantStock(t, f.sr, f.item, before, "one reservation")
	})
}

// A replay-only reserve (the gateway's, with the order queue down) answers
// a retry from its record as a reserve would, and reserves nothing for a
// request without one.
func TestReplayOnlyReservesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := mustFixture(t, 10, 1)
	replayOnly := func(rid, orderNo string, user int64, fp string) stock.ReserveResult {
		t.Helper()
		res, err := f.s.Reserve(ctx, stock.Reservation{Item: f.item, RequestID: rid, OrderNo: orderNo, UserID: user,
			Quantity: 1, Fingerprint: fp, Event: []byte(`{}`), ReplayOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	f.reserve(t, "done", "o-done", 1, 1, "fp")
	f.markPublished(t, "done", "o-done")
	f.reserve(t, "flight", "o-flight", 2, 1, "fp")
	dump := func() []string { return stocktest.Dump(t, f.sr) }
	before := dump()
	for _, c := range []struct {
		rid  string
		user int64
		fp   string
		want stock.Outcome
		no   string
	}{
		{"new", 3, "fp", stock.NoRecord, ""},
		{"flight", 2, "fp", stock.InProgress, ""},
		{"done", 1, "fp-other", stock.IdempotencyKeyReused, "o-done"},
	} {
		if r := replayOnly(c.rid, "o-"+c.rid+"-2", c.user, c.fp); r.Outcome != c.want || r.OrderNo != c.no {
			t.Errorf("replay-only %s: %+v, want %s %q", c.rid, r, c.want, c.no)
		}
	}
	if after := dump(); !slices.Equal(after, before) {
		t.Errorf("replay-only calls changed Redis:\n%v\n%v", before, after)
	}
	if r := replayOnly("done", "o-done-2", 1, "fp"); r.Outcome != stock.Replayed || r.OrderNo != "o-done" || r.Remaining != 9 {
		t.Errorf("replay-only retry of an accepted request: %+v, want a replay of o-done, remaining 9", r)
	}
	stocktest.WantStock(t, f.sr, f.item, 8, "the two reservations")
}
