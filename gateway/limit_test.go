package gateway

import (
	"testing"
	"time"
)

func TestUserBucketRefillsAtItsRate(t *testing.T) {
	t.Parallel()
	l := newLimiter(5, 10, 0, 0)
	now := time.Now()
	for i := range 10 {
		if scope, _ := l.allow(1, now); scope != "" {
			t.Fatalf("request %d of a burst of 10 refused (%s)", i+1, scope)
		}
	}
	scope, wait := l.allow(1, now)
	if scope != "user" || wait != 200*time.Millisecond {
		t.Fatalf("11th request: scope %q wait %v, want user 200ms", scope, wait)
	}
	// A refusal takes nothing: after the wait there is exactly one token.
	now = now.Add(200 * time.Millisecond)
	if scope, _ := l.allow(1, now); scope != "" {
		t.Fatalf("refused after waiting as told (%s)", scope)
	}
	if scope, _ := l.allow(1, now); scope != "user" {
		t.Fatal("a second request in the same instant was let through")
	}
	// Another user has their own bucket.
	if scope, _ := l.allow(2, now); scope != "" {
		t.Fatalf("another user refused (%s)", scope)
	}
	// A long pause refills to the burst, not beyond.
	now = now.Add(time.Hour)
	for i := range 10 {
		if scope, _ := l.allow(1, now); scope != "" {
			t.Fatalf("after an hour, request %d refused", i+1)
		}
	}
	if scope, _ := l.allow(1, now); scope != "user" {
		t.Fatal("the bucket refilled beyond its burst")
	}
}

func TestLimiterMemoryIsBounded(t *testing.T) {
	t.Parallel()
	l := newLimiter(1, 1, 0, 0)
	now := time.Now()
	hot := int64(-1)
	l.allow(hot, now) // takes the hot user's only token
	for u := int64(1); u <= 3*maxTrackedUsers; u++ {
		l.allow(u, now)
		if u%1000 == 0 { // the hot user keeps being seen: never forgotten
			if scope, _ := l.allow(hot, now); scope != "user" {
				t.Fatalf("after %d other users the hot user's empty bucket was forgotten", u)
			}
		}
	}
	n := 0
	for i := range l.shards {
		n += len(l.shards[i].cur) + len(l.shards[i].prev)
	}
	if n > maxTrackedUsers {
		t.Fatalf("%d users tracked, bound %d", n, maxTrackedUsers)
	}
}

func TestGlobalLimit(t *testing.T) {
	t.Parallel()
	l := newLimiter(0, 0, 10, 2)
	now := time.Now()
	for u := range int64(2) {
		if scope, _ := l.allow(u, now); scope != "" {
			t.Fatalf("request %d within the global burst refused", u)
		}
	}
	if scope, wait := l.allow(3, now); scope != "global" || wait <= 0 {
		t.Fatalf("third request: %q %v, want global", scope, wait)
	}
}
