package gateway

import (
	"math"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// limiter is the gateway's in-process rate limit: a token bucket per user,
// kept in an LRU so memory stays bounded however many users appear, plus an
// optional global bucket. It adds no Redis round trip to the hot path; with
// several gateway replicas each enforces its own share.
type limiter struct {
	perUser rate.Limit
	burst   int
	global  *rate.Limiter // nil ⇒ off
	mu      sync.Mutex
	users   *lru.Cache[int64, *rate.Limiter]
}

// maxTrackedUsers bounds the limiter's memory (~100 B per user). A user
// evicted from the LRU starts again with a full bucket, which only matters
// for a flood of more distinct users than this within a few seconds.
const maxTrackedUsers = 200_000

func newLimiter(userRPS float64, userBurst int, globalRPS float64, globalBurst int) *limiter {
	l := &limiter{perUser: rate.Limit(userRPS), burst: userBurst}
	if userRPS <= 0 {
		l.perUser = rate.Inf
	}
	if globalRPS > 0 {
		l.global = rate.NewLimiter(rate.Limit(globalRPS), max(globalBurst, 1))
	}
	l.users, _ = lru.New[int64, *rate.Limiter](maxTrackedUsers)
	return l
}

// allow takes a token for the user (and the global bucket); when refused it
// says which limit and how long to wait.
func (l *limiter) allow(userID int64, now time.Time) (scope string, retryAfter time.Duration) {
	if l.perUser != rate.Inf {
		l.mu.Lock()
		lim, ok := l.users.Get(userID)
		if !ok {
			lim = rate.NewLimiter(l.perUser, l.burst)
			l.users.Add(userID, lim)
		}
		l.mu.Unlock()
		r := lim.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return "user", d
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

// retryAfterSeconds rounds a wait up to whole seconds for the header.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
