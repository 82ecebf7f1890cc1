package stock_test

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/lock"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

// The strategies race: the same flash sale (b.N requests for b.N/4 units
// of one item, 5% of them by a user among the last 2·c already seen, c =
// strategyConcurrency in flight) taken three ways, so the reason for the
// reserve script is measured rather than quoted:
//
//   - naive: GET the stock, EXISTS the user's marker, DECRBY, SET the
//     marker, deciding in the client between round trips;
//   - lock: the same inside a pkg/lock lock (SET NX PX, one lock per item,
//     backoff 2–50 ms, given up after 2 s);
//   - script: the reserve script (Store.Reserve).
//
// Each reports what it granted past the stock (oversold), the users it
// granted twice (dup-users), the requests it gave up (gave-up: the lock not
// obtained in time), errors, and the latency's p50 and p99. naive and lock
// are measured, not judged; the script fails the benchmark if it oversold,
// granted a user twice or erred.
//
//	go test -tags dev -run '^$' -bench Strategies -benchtime 20000x ./pkg/stock/
const (
	strategyConcurrency = 500
	strategyRepeatShare = 0.05
	strategyLockWait    = 2 * time.Second
)

// answer is what one strategy did with one request.
type answer uint8

const (
	answerGranted answer = iota
	answerSoldOut
	answerAlready
	answerGaveUp
	answerFailed
)

// errLockLost marks a lock request whose lock expired before its release:
// its answer stands, but its section ran unprotected.
var errLockLost = errors.New("lock expired while held")

func BenchmarkStrategies(b *testing.B) {
	rd := testenv.MustRedis(b)
	// A pool for every request in flight, as a strategy's wait for a
	// connection is not what is measured.
	client := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), PoolSize: strategyConcurrency + 8,
		ReadTimeout: 5 * time.Second, PoolTimeout: 30 * time.Second})
	b.Cleanup(func() { client.Close() })
	for _, name := range []string{"naive", "lock", "script"} {
		runs := 0
		b.Run(name, func(b *testing.B) {
			runs++
			prefix := rd.Prefix + name + strconv.Itoa(runs) + ":"
			b.Cleanup(func() { testenv.DeleteKeys(context.Background(), client, prefix) })
			raceStrategy(b, name, client, prefix)
		})
	}
}

// raceStrategy runs b.N requests through the strategy on a fresh sale under
// prefix and reports what it did.
func raceStrategy(b *testing.B, name string, client *redis.Client, prefix string) {
	ctx := context.Background()
	it := stock.Item{ActivityID: 1, ItemID: 1}
	units := max(1, int64(b.N/4))
	st := stock.New(client, prefix)
	now := time.Now()
	if _, err := st.Preheat(ctx, stock.Sale{Item: it, Stock: units, StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Cap: 1}); err != nil {
		b.Fatal(err)
	}
	take := strategyTake(name, st, stocktest.On(client, prefix), lock.New(client, prefix), it)
	users := strategyUsers(b.N)
	answers, took := make([]answer, b.N), make([]time.Duration, b.N)
	var next, lost, failed atomic.Int64
	var firstErr sync.Once
	b.SetParallelism(max(1, strategyConcurrency/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1) - 1)
			start := time.Now()
			a, err := take(ctx, i, users[i])
			took[i] = time.Since(start)
			if errors.Is(err, errLockLost) {
				lost.Add(1)
				err = nil
			}
			if err != nil {
				a = answerFailed
				failed.Add(1)
				firstErr.Do(func() { b.Logf("%s: first error: %v", name, err) })
			}
			answers[i] = a
		}
	})
	b.StopTimer()

	var granted, gaveUp int64
	grants := map[int64]int{}
	for i, a := range answers {
		switch a {
		case answerGranted:
			granted++
			grants[users[i]]++
		case answerGaveUp:
			gaveUp++
		}
	}
	dups := 0
	for _, n := range grants {
		if n > 1 {
			dups++
		}
	}
	oversold := max(0, granted-units)
	slices.Sort(took)
	b.ReportMetric(float64(granted), "granted")
	b.ReportMetric(float64(oversold), "oversold")
	b.ReportMetric(float64(dups), "dup-users")
	b.ReportMetric(float64(gaveUp), "gave-up")
	b.ReportMetric(float64(failed.Load()), "errors")
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	if n := lost.Load(); n > 0 {
		b.Logf("%s: %d critical sections outlived the 1 s lock TTL (ran unprotected)", name, n)
	}
	if name == "script" && (oversold > 0 || dups > 0 || failed.Load() > 0) {
		b.Errorf("the reserve script oversold %d units, granted %d users twice, failed %d requests", oversold, dups, failed.Load())
	}
}

// strategyUsers draws one user per request: a new one, or
// (strategyRepeatShare) one among the last 2·c, so the same user's requests
// overlap in flight.
func strategyUsers(n int) []int64 {
	rng := mrand.New(mrand.NewPCG(1, 0x5eed))
	window := 2 * strategyConcurrency
	users := make([]int64, n)
	for i := range users {
		if i > 0 && rng.Float64() < strategyRepeatShare {
			users[i] = users[i-1-rng.IntN(min(i, window))]
			continue
		}
		users[i] = rng.Int64N(1<<40) + 1
	}
	return users
}

// strategyTake is the strategy's way to take one unit for user; i is the
// request's index.
func strategyTake(name string, st *stock.Store, r stocktest.Redis, lk *lock.Locker, it stock.Item) func(ctx context.Context, i int, user int64) (answer, error) {
	switch name {
	case "naive":
		return func(ctx context.Context, _ int, user int64) (answer, error) { return checkAndTake(ctx, r, it, user) }
	case "lock":
		name := it.Tag() + ":stock"
		return func(ctx context.Context, _ int, user int64) (answer, error) {
			l, err := lk.Acquire(ctx, name, time.Second, lock.WithBackoff(2*time.Millisecond, 50*time.Millisecond), lock.WithMaxWait(strategyLockWait))
			if errors.Is(err, lock.ErrNotAcquired) {
				return answerGaveUp, nil
			}
			if err != nil {
				return answerFailed, err
			}
			a, err := checkAndTake(ctx, r, it, user)
			if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil && err == nil {
				if errors.Is(rerr, lock.ErrNotHeld) {
					return a, errLockLost
				}
				err = rerr
			}
			return a, err
		}
	default:
		return func(ctx context.Context, i int, user int64) (answer, error) {
			rid := "s" + strconv.Itoa(i)
			res, err := st.Reserve(ctx, stock.Reservation{Item: it, RequestID: rid, OrderNo: "o" + strconv.Itoa(i), UserID: user,
				Quantity: 1, Fingerprint: strconv.FormatInt(user, 36), Event: []byte(`{"requestId":"` + rid + `"}`)})
			if err != nil {
				return answerFailed, err
			}
			switch res.Outcome {
			case stock.Reserved:
				return answerGranted, nil
			case stock.SoldOut:
				return answerSoldOut, nil
			case stock.AlreadyPurchased:
				return answerAlready, nil
			}
			return answerFailed, errors.New("reserve answered " + string(res.Outcome))
		}
	}
}

// checkAndTake is the reserve's "check the stock, check the user's marker,
// take one" written the obvious way, in the client: four round trips with
// gaps between them and nothing atomic.
func checkAndTake(ctx context.Context, r stocktest.Redis, it stock.Item, user int64) (answer, error) {
	k := stocktest.KeysOf(r, it)
	n, err := r.Client.Get(ctx, k.Stock).Int64()
	if err != nil {
		return answerFailed, err
	}
	if n < 1 {
		return answerSoldOut, nil
	}
	held, err := r.Client.Exists(ctx, k.Limit(user)).Result()
	if err != nil {
		return answerFailed, err
	}
	if held == 1 {
		return answerAlready, nil
	}
	if err := r.Client.DecrBy(ctx, k.Stock, 1).Err(); err != nil {
		return answerFailed, err
	}
	if err := r.Client.Set(ctx, k.Limit(user), "1", time.Hour).Err(); err != nil {
		return answerFailed, err
	}
	return answerGranted, nil
}
