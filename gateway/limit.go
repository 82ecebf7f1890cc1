package gateway

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter is the gateway's in-process rate limit: a token bucket per user,
// kept in bounded memory however many users appear, plus an optional global
// bucket. It adds no Redis round trip to the hot path; with several gateway
// replicas each enforces its own share.
//
// The per-user buckets are plain values in maps without pointers, so the
// garbage collector never scans them: a flash sale brings hundreds of
// thousands of users, and a pointer per user (rate.Limiter in an LRU) made
// every collection walk them all.
//
// It measures time with the monotonic clock (ticks from time.Now, never the
// wall clock): a wall clock stepped back would refill no bucket until it
// had caught up again, refusing a user for the whole step.
type limiter struct {
	perUser float64 // tokens per second; 0 ⇒ off
	burst   float64
	global  *rate.Limiter // nil ⇒ off
	shards  [limiterShards]userBuckets
	// epoch is the tick the buckets' times count from.
	epoch time.Time
}

const (
	limiterShards = 16
	// maxTrackedUsers bounds the limiter's memory (about 40 B per user). A
	// user not seen while maxTrackedUsers/2 others arrived is forgotten and
	// starts again with a full bucket, which only matters for a flood of
	// more distinct users than this within a few seconds.
	maxTrackedUsers = 200_000
)

// userBuckets is one shard: the buckets of users seen lately (cur) and
// before that (prev). When cur is full, prev is dropped and cur becomes
// prev: an approximate LRU without per-entry pointers.
type userBuckets struct {
	mu        sync.Mutex
	cur, prev map[int64]bucket
}

type bucket struct {
	tokens float64
	at     int64 // nanoseconds after the limiter's epoch of the last refill
}

func newLimiter(userRPS float64, userBurst int, globalRPS float64, globalBurst int) *limiter {
	l := &limiter{perUser: userRPS, burst: float64(max(userBurst, 1)), epoch: time.Now()}
	if globalRPS > 0 {
		l.global = rate.NewLimiter(rate.Limit(globalRPS), max(globalBurst, 1))
	}
	for i := range l.shards {
		l.shards[i].cur = map[int64]bucket{}
	}
	return l
}

// allow takes a token for the user (and the global bucket); when refused it
// says which limit and how long to wait. now is a tick: a time.Now reading,
// whose monotonic part is what is compared.
func (l *limiter) allow(userID int64, now time.Time) (scope string, retryAfter time.Duration) {
	if l.perUser > 0 {
		if wait := l.takeUser(userID, int64(now.Sub(l.epoch))); wait > 0 {
			return "user", wait
		}
	}
	if l.global != nil {
		r := l.global.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return "global", d
		}
	}
	return "", 0
}

// takeUser takes one token from the user's bucket, or says how long until
// there is one (taking nothing).
func (l *limiter) takeUser(userID int64, now int64) time.Duration {
	sh := &l.shards[uint64(userID)%limiterShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, inCur := sh.cur[userID]
	if !inCur {
		var inPrev bool
		if b, inPrev = sh.prev[userID]; inPrev {
			delete(sh.prev, userID)
		} else {
			b = bucket{tokens: l.burst, at: now}
		}
	}
	if now > b.at {
		b.tokens = min(l.burst, b.tokens+float64(now-b.at)/1e9*l.perUser)
		b.at = now
	}
	var wait time.Duration
	if b.tokens >= 1 {
		b.tokens--
	} else {
		wait = time.Duration((1 - b.tokens) / l.perUser * 1e9)
	}
	if !inCur && len(sh.cur) >= maxTrackedUsers/limiterShards/2 {
		sh.prev, sh.cur = sh.cur, make(map[int64]bucket, len(sh.cur))
	}
	sh.cur[userID] = b
	return max(wait, 0)
}

// retryAfterSeconds rounds a wait up to whole seconds for the header.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
