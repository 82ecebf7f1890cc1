// Package stocktest lets tests reach behind a stock.Store: read, damage or
// drop one item's Redis keys, as a lost key, a stray marker or an operator's
// mistake would. Its helpers run on the client and key prefix the test
// already holds (the ones it gave stock.New, see On), as the store hands
// neither out. It is for tests and the test tools (bench audits, the chaos
// suite); the order path never imports it, and a change of key layout
// changes it together with package stock.
package stocktest

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/internal/layout"
)

// TB is the part of testing.TB the helpers use (so the bench's audits,
// which are not tests, can use them without importing package testing).
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// Redis is a store's Redis as the test holds it: the client and the key
// prefix it gave stock.New.
type Redis struct {
	Client redis.UniversalClient
	Prefix string
}

// On is the Redis of a store made with stock.New(client, prefix).
func On(client redis.UniversalClient, prefix string) Redis {
	return Redis{Client: client, Prefix: prefix}
}

// store is a stock.Store on r, for the helpers that read through its typed
// methods.
func (r Redis) store() *stock.Store { return stock.New(r.Client, r.Prefix) }

// Keys are an item's (bucket's) Redis keys.
type Keys = layout.Keys

// KeysOf are the keys of it in r, for a test that reads or damages one
// key directly.
func KeysOf(r Redis, it stock.Item) Keys {
	return layout.For(r.Prefix, it.Tag())
}

// Stock is the item's (bucket's) stock; ok is false when the key is missing.
func Stock(tb TB, r Redis, it stock.Item) (n int64, ok bool) {
	tb.Helper()
	n, err := r.Client.Get(context.Background(), KeysOf(r, it).Stock).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false
	}
	if err != nil {
		tb.Fatalf("reading the stock of %s bucket %d: %v", it, it.Bucket, err)
	}
	return n, true
}

// MustStock is Stock that fails the test when the key is missing.
func MustStock(tb TB, r Redis, it stock.Item) int64 {
	tb.Helper()
	n, ok := Stock(tb, r, it)
	if !ok {
		tb.Fatalf("%s bucket %d has no stock key", it, it.Bucket)
	}
	return n
}

// WantStock fails the test, going on, when the item's (bucket's) stock is
// not want; why says when, or what want stands for ("": nothing to add).
func WantStock(tb interface {
	TB
	Errorf(format string, args ...any)
}, r Redis, it stock.Item, want int64, why string) {
	tb.Helper()
	if got := MustStock(tb, r, it); got != want {
		if why != "" {
			why = " (" + why + ")"
		}
		tb.Errorf("redis stock %d, want %d%s", got, want, why)
	}
}

// SetStock overwrites the item's (bucket's) stock, without expiry.
func SetStock(tb TB, r Redis, it stock.Item, n int64) {
	tb.Helper()
	if err := r.Client.Set(context.Background(), KeysOf(r, it).Stock, n, 0).Err(); err != nil {
		tb.Fatalf("setting the stock of %s: %v", it, err)
	}
}

// AddStock adds delta (which may be negative) to the item's (bucket's) stock.
func AddStock(tb TB, r Redis, it stock.Item, delta int64) {
	tb.Helper()
	if err := r.Client.IncrBy(context.Background(), KeysOf(r, it).Stock, delta).Err(); err != nil {
		tb.Fatalf("adding %d to the stock of %s: %v", delta, it, err)
	}
}

// MarkerOwner is the requestId the user's limit marker names ("" when the
// user holds none).
func MarkerOwner(tb TB, r Redis, it stock.Item, userID int64) string {
	tb.Helper()
	owner, err := r.store().MarkerOwner(context.Background(), it, userID)
	if err != nil {
		tb.Fatal(err)
	}
	return owner
}

// SetMarker gives the user a limit marker naming owner, as a stray or lost
// write would (the marker index is left alone).
func SetMarker(tb TB, r Redis, it stock.Item, userID int64, owner string) {
	tb.Helper()
	if err := r.Client.Set(context.Background(), KeysOf(r, it).Limit(userID), owner, 0).Err(); err != nil {
		tb.Fatalf("setting a marker of user %d: %v", userID, err)
	}
}

// DropMarker deletes the user's limit marker behind the scripts' back (the
// marker index is left alone).
func DropMarker(tb TB, r Redis, it stock.Item, userID int64) {
	tb.Helper()
	if err := r.Client.Del(context.Background(), KeysOf(r, it).Limit(userID)).Err(); err != nil {
		tb.Fatalf("deleting the marker of user %d: %v", userID, err)
	}
}

// CountMarkers counts the limit markers of the item (bucket) by a keyspace
// scan, whatever its marker index says.
func CountMarkers(tb TB, r Redis, it stock.Item) int {
	tb.Helper()
	n := 0
	iter := r.Client.Scan(context.Background(), 0, KeysOf(r, it).LimitPattern(), 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		tb.Fatalf("scanning markers of %s: %v", it, err)
	}
	return n
}

// DropMarkerIndex deletes the item's (bucket's) marker index, as a Redis
// that lost it, or a binary older than the index, would leave it.
func DropMarkerIndex(tb TB, r Redis, it stock.Item) {
	tb.Helper()
	if err := r.Client.Del(context.Background(), KeysOf(r, it).MarkerIndex()).Err(); err != nil {
		tb.Fatalf("deleting the marker index of %s: %v", it, err)
	}
}

// Journal is the item's (bucket's) journal: requestId → entry.
func Journal(tb TB, r Redis, it stock.Item) map[string]string {
	tb.Helper()
	j, err := r.store().Journal(context.Background(), it)
	if err != nil {
		tb.Fatal(err)
	}
	return j
}

// Fate is a reservation's release guard ("" when it has none).
func Fate(tb TB, r Redis, it stock.Item, orderNo string) string {
	tb.Helper()
	f, err := r.store().Fate(context.Background(), it, orderNo)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// SaleField is one field of the item's (bucket's) sale hash ("" when
// missing): starts, ends, cap or buckets.
func SaleField(tb TB, r Redis, it stock.Item, field string) string {
	tb.Helper()
	v, err := r.Client.HGet(context.Background(), KeysOf(r, it).Sale, field).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatalf("reading the sale of %s: %v", it, err)
	}
	return v
}

// DropSale deletes the item's (bucket's) stock and sale, as a Redis that
// lost them would.
func DropSale(tb TB, r Redis, it stock.Item) {
	tb.Helper()
	k := KeysOf(r, it)
	for _, key := range []string{k.Stock, k.Sale} {
		if err := r.Client.Del(context.Background(), key).Err(); err != nil {
			tb.Fatalf("deleting the keys of %s: %v", it, err)
		}
	}
}
