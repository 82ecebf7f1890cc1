package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"orderpipe/pkg/lock"
	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/rediskeys"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
)

// StrategyConfig is one --redis-strategies run.
type StrategyConfig struct {
	Redis       redisconn.Config
	Concurrency int
	Requests    int
	Stock       int64
	RepeatShare float64 // share of requests by a user seen among the last 2·c
	Seed        int64
	// KeyPrefix is where the run's keys live; default "bench:<random>:".
	// Everything under it is deleted afterwards.
	KeyPrefix string
	// LockWait bounds how long the lock strategy retries a busy lock before
	// failing the request fast (default 2s).
	LockWait time.Duration
	Progress io.Writer
}

// StrategyResult is what one strategy did with the same workload.
type StrategyResult struct {
	Name             string  `json:"name"`
	Requests         int     `json:"requests"`
	Granted          int     `json:"granted"`
	SoldOut          int     `json:"soldOut"`
	AlreadyPurchased int     `json:"alreadyPurchased"`
	GaveUp           int     `json:"gaveUp"`   // lock not obtained within LockWait: the client is told "busy"
	LockLost         int     `json:"lockLost"` // the lock expired while its section ran (counted in the outcomes too)
	Errors           int     `json:"errors"`
	FinalStock       int64   `json:"finalStock"`
	OversoldUnits    int64   `json:"oversoldUnits"`
	DuplicateUsers   int     `json:"duplicateUsers"` // users granted more than once
	ReqPerSec        float64 `json:"reqPerSec"`
	Latency          Latency `json:"latencyMs"`
	FirstError       string  `json:"firstError,omitempty"`
}

// StrategyReport compares the strategies.
type StrategyReport struct {
	Concurrency int              `json:"concurrency"`
	Requests    int              `json:"requests"`
	Stock       int64            `json:"stock"`
	RepeatShare float64          `json:"repeatShare"`
	Repeats     int              `json:"repeats"` // requests by a user already in the workload
	Seed        int64            `json:"seed"`
	Results     []StrategyResult `json:"results"`
	// OK: the reserve script neither oversold nor granted a user twice. The
	// other two are measured, not judged: their failures are probabilistic.
	OK bool `json:"ok"`
}

type outcome uint8

const (
	granted outcome = iota
	soldOut
	alreadyPurchased
	gaveUp
	failed
)

// errLockLost marks a lock-strategy request whose lock expired before its
// release: its outcome stands, but the section ran unprotected.
var errLockLost = errors.New("lock expired while held")

// strategy takes one unit for user; i is the request's index.
type strategy struct {
	name string
	take func(ctx context.Context, i int, user int64) (outcome, error)
}

// RunStrategies runs the same workload (users, repeats, stock, concurrency)
// against three implementations of "check stock, check the user's limit,
// take one", each on fresh keys under a unique prefix deleted afterwards.
func RunStrategies(ctx context.Context, cfg StrategyConfig) (*StrategyReport, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Requests <= 0 {
		return nil, errors.New("-n must be positive")
	}
	if cfg.RepeatShare < 0 || cfg.RepeatShare > 1 {
		return nil, errors.New("--repeat-share must be between 0 and 1")
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()
	}
	if cfg.LockWait <= 0 {
		cfg.LockWait = 2 * time.Second
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	rdb, err := cfg.Redis.New(redisconn.Options{PoolSize: cfg.Concurrency + 8, ReadTimeout: 5 * time.Second, PoolTimeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("reaching redis at %s: %w", cfg.Redis, err)
	}

	users, repeats := strategyUsers(cfg)
	rep := &StrategyReport{Concurrency: cfg.Concurrency, Requests: cfg.Requests, Stock: cfg.Stock,
		RepeatShare: cfg.RepeatShare, Repeats: repeats, Seed: cfg.Seed, OK: true}
	if cfg.KeyPrefix == "" {
		var b [4]byte
		rand.Read(b[:]) //nolint:errcheck // never fails since Go 1.24
		cfg.KeyPrefix = "bench:" + hex.EncodeToString(b[:]) + ":"
	}
	item := stock.Item{ActivityID: 1, ItemID: 1}

	for _, name := range []string{"naive", "lock", "reserve"} {
		prefix := cfg.KeyPrefix + name + ":"
		res, err := func() (StrategyResult, error) {
			st := stock.New(rdb, prefix)
			defer rediskeys.Unlink(context.WithoutCancel(ctx), rdb, strategyKeys(prefix, item, users)...) //nolint:errcheck // best effort
			now := time.Now()
			// Preheat as the product does: the reserve script also needs the sale window.
			if _, err := st.Preheat(ctx, stock.Sale{Item: item, Stock: cfg.Stock, StartsAt: now.Add(-time.Minute),
				EndsAt: now.Add(time.Hour), Cap: 1}); err != nil {
				return StrategyResult{}, err
			}
			s := newStrategy(name, st, stocktest.On(rdb, prefix), lock.New(rdb, prefix), item, cfg.LockWait)
			fmt.Fprintf(cfg.Progress, "bench: strategy %s: %d requests at c=%d on %d units\n", name, cfg.Requests, cfg.Concurrency, cfg.Stock)
			res := race(ctx, s, users, cfg)
			final, err := st.BucketStocks(ctx, item, 1)
			if err == nil && final[0] == nil {
				err = errors.New("no stock key")
			}
			if err != nil {
				return StrategyResult{}, fmt.Errorf("reading final stock: %w", err)
			}
			res.FinalStock = *final[0]
			res.OversoldUnits = max(0, int64(res.Granted)-cfg.Stock)
			return res, nil
		}()
		if err != nil {
			return nil, fmt.Errorf("strategy %s: %w", name, err)
		}
		rep.Results = append(rep.Results, res)
		if name == "reserve" && (res.OversoldUnits > 0 || res.DuplicateUsers > 0 || res.FinalStock < 0) {
			rep.OK = false
		}
	}
	return rep, nil
}

// strategyUsers draws one user per request: a new one, or (RepeatShare) one
// among the last 2·c, so the same user's requests overlap in flight.
func strategyUsers(cfg StrategyConfig) (users []int64, repeats int) {
	rng := mrand.New(mrand.NewPCG(uint64(cfg.Seed), 0x5eed))
	window := max(1, 2*cfg.Concurrency)
	users = make([]int64, cfg.Requests)
	for i := range users {
		if i > 0 && rng.Float64() < cfg.RepeatShare {
			users[i] = users[i-1-rng.IntN(min(i, window))]
			repeats++
			continue
		}
		users[i] = rng.Int64N(1<<40) + 1
	}
	return users, repeats
}

func newStrategy(name string, st *stock.Store, sr stocktest.Redis, lk *lock.Locker, item stock.Item, lockWait time.Duration) strategy {
	// checkAndTake is the critical section written the obvious way: read,
	// decide in the client, write. Four round trips with gaps between them.
	// It reaches behind the store through stocktest, as only a test tool may.
	checkAndTake := func(ctx context.Context, user int64) (outcome, error) {
		out, err := stocktest.CheckAndTake(ctx, sr, item, user)
		if err != nil {
			return failed, err
		}
		return strategyOutcome(out)
	}
	switch name {
	case "naive":
		return strategy{name: name, take: func(ctx context.Context, _ int, user int64) (outcome, error) {
			return checkAndTake(ctx, user)
		}}
	case "lock":
		// The product's lock (SET NX PX with a token, Lua compare-and-delete
		// release) around the same critical section, one lock per item;
		// a busy lock is retried with jittered exponential backoff from 2ms
		// up to 50ms, and the request fails fast after LockWait.
		name := lockName(item)
		return strategy{name: "lock", take: func(ctx context.Context, _ int, user int64) (outcome, error) {
			l, err := lk.Acquire(ctx, name, time.Second, lock.WithBackoff(2*time.Millisecond, 50*time.Millisecond), lock.WithMaxWait(lockWait))
			if errors.Is(err, lock.ErrNotAcquired) {
				return gaveUp, nil
			}
			if err != nil {
				return failed, err
			}
			out, err := checkAndTake(ctx, user)
			if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil && err == nil {
				if errors.Is(rerr, lock.ErrNotHeld) {
					return out, errLockLost // the lock expired under us: the section ran unprotected
				}
				err = rerr
			}
			return out, err
		}}
	default:
		return strategy{name: "reserve", take: func(ctx context.Context, i int, user int64) (outcome, error) {
			rid := strategyRequestID(i)
			res, err := st.Reserve(ctx, stock.Reservation{Item: item, RequestID: rid, OrderNo: strategyOrderNo(i), UserID: user,
				Quantity: 1, Fingerprint: strconv.FormatInt(user, 36), Event: []byte(`{"requestId":"` + rid + `"}`)})
			if err != nil {
				return failed, err
			}
			return strategyOutcome(res.Outcome)
		}}
	}
}

// strategyOutcome is what the stock's answer means for the strategies.
func strategyOutcome(o stock.Outcome) (outcome, error) {
	switch o {
	case stock.Reserved:
		return granted, nil
	case stock.SoldOut:
		return soldOut, nil
	case stock.AlreadyPurchased:
		return alreadyPurchased, nil
	}
	return failed, fmt.Errorf("reserve answered %s", o)
}

func lockName(it stock.Item) string  { return it.Tag() + ":stock" }
func strategyRequestID(i int) string { return "s" + strconv.Itoa(i) }
func strategyOrderNo(i int) string   { return "o" + strconv.Itoa(i) }

// strategyKeys names every key a strategy run can have written, for its
// cleanup to delete by name: a SCAN would walk the whole keyspace of a
// shared Redis. TestRedisStrategies checks by SCAN that nothing is left.
func strategyKeys(prefix string, it stock.Item, users []int64) []string {
	k := stocktest.KeysOf(stocktest.On(nil, prefix), it)
	names := []string{k.Stock, k.Sale, k.Journal, k.MarkerIndex(), prefix + "lock:" + lockName(it), prefix + "fence:" + lockName(it)}
	seen := map[int64]bool{}
	for i, u := range users {
		names = append(names, k.Req(strategyRequestID(i)), k.Order(strategyOrderNo(i)))
		if !seen[u] {
			seen[u] = true
			names = append(names, k.Limit(u))
		}
	}
	return names
}

// race runs every request through s from cfg.Concurrency goroutines.
func race(ctx context.Context, s strategy, users []int64, cfg StrategyConfig) StrategyResult {
	outs := make([]outcome, len(users))
	lat := make([]time.Duration, len(users))
	var next, lost atomic.Int64
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	// A line a second: the lock strategy takes several seconds, which
	// would otherwise be silence.
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				fmt.Fprintf(cfg.Progress, "bench: strategy %s: %3.0fs  %d/%d requests\n", s.name, time.Since(start).Seconds(),
					min(next.Load(), int64(len(users))), len(users))
			}
		}
	}()
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(users) || ctx.Err() != nil {
					return
				}
				t := time.Now()
				out, err := s.take(ctx, i, users[i])
				lat[i] = time.Since(t)
				if errors.Is(err, errLockLost) {
					lost.Add(1)
					err = nil
				}
				if err != nil {
					out = failed
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				outs[i] = out
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopProgress)
	<-progressDone

	res := StrategyResult{Name: s.name, Requests: len(users), ReqPerSec: float64(len(users)) / elapsed.Seconds(), LockLost: int(lost.Load())}
	grants := map[int64]int{}
	for i, o := range outs {
		switch o {
		case granted:
			res.Granted++
			grants[users[i]]++
		case soldOut:
			res.SoldOut++
		case alreadyPurchased:
			res.AlreadyPurchased++
		case gaveUp:
			res.GaveUp++
		default:
			res.Errors++
		}
	}
	for _, n := range grants {
		if n > 1 {
			res.DuplicateUsers++
		}
	}
	if firstErr != nil {
		res.FirstError = firstErr.Error()
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	slices.Sort(lat)
	res.Latency = Latency{P50: ms(pct(lat, .50)), P95: ms(pct(lat, .95)), P99: ms(pct(lat, .99)), Max: ms(lat[len(lat)-1]),
		Mean: ms(sum / time.Duration(len(lat)))}
	return res
}

// PurgeKeys deletes every Redis key under prefix, which must not be empty:
// how `make bench` removes the keys of its throwaway pipeline.
func PurgeKeys(ctx context.Context, rc redisconn.Config, prefix string) (int, error) {
	if prefix == "" {
		return 0, errors.New("refusing to purge without a key prefix (REDIS_KEY_PREFIX is empty)")
	}
	rdb, err := rc.New(redisconn.Options{ReadTimeout: 5 * time.Second})
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	return rediskeys.Delete(ctx, rdb, prefix+"*")
}

// WriteText writes the comparison as a table.
func (r *StrategyReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\nRedis strategies: one item × %d units, %d requests at c=%d, %d of them by a user already seen (seed %d)\n",
		r.Stock, r.Requests, r.Concurrency, r.Repeats, r.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tgranted\toversold\tfinal stock\tdup users\tsold out\talready\tgave up\terrors\treq/s\tp50 ms\tp99 ms\tmax ms\t")
	for _, s := range r.Results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t\n", s.Name, s.Granted, s.OversoldUnits, s.FinalStock,
			s.DuplicateUsers, s.SoldOut, s.AlreadyPurchased, s.GaveUp, s.Errors, s.ReqPerSec, s.Latency.P50, s.Latency.P99, s.Latency.Max)
	}
	tw.Flush()
	for _, s := range r.Results {
		if s.LockLost > 0 {
			fmt.Fprintf(w, "  %s: %d critical sections outlived the 1s lock TTL (ran unprotected)\n", s.Name, s.LockLost)
		}
		if s.FirstError != "" {
			fmt.Fprintf(w, "  %s: first error: %s\n", s.Name, s.FirstError)
		}
	}
	if r.OK {
		fmt.Fprintln(w, "reserve script: no oversell, no user granted twice")
	} else {
		fmt.Fprintln(w, "FAIL reserve script oversold or granted a user twice")
	}
}

// Passed reports whether the reserve script neither oversold nor granted a user twice.
func (r *StrategyReport) Passed() bool { return r.OK }
