package stocktest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/internal/layout"
)

// Dump reads every item's (bucket's) keys with their values, one sorted line each ("key=value", a hash's map, or "key:type").
func Dump(tb TB, st *stock.Store) []string {
	tb.Helper()
	ctx := context.Background()
	rdb, prefix := layout.Open(st)
	keys := scan(tb, st, prefix+"*{a*") // every item's hash tag (stock.Item.Tag)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		switch typ := rdb.Type(ctx, k).Val(); typ {
		case "string":
			out = append(out, fmt.Sprintf("%s=%s", k, rdb.Get(ctx, k).Val()))
		case "hash":
			out = append(out, fmt.Sprintf("%s=%v", k, rdb.HGetAll(ctx, k).Val()))
		default:
			out = append(out, fmt.Sprintf("%s:%s", k, typ))
		}
	}
	return out
}

// ItemKeys lists the keys of the item, every bucket of it, sorted.
func ItemKeys(tb TB, st *stock.Store, it stock.Item) []string {
	tb.Helper()
	_, prefix := layout.Open(st)
	keys := append(scan(tb, st, prefix+"*"+it.Base().Tag()+"*"), BucketKeys(tb, st, it)...)
	slices.Sort(keys)
	return keys
}

// BucketKeys lists the keys of the item's buckets past the first (one bucket keeps the plain keys), sorted.
func BucketKeys(tb TB, st *stock.Store, it stock.Item) []string {
	tb.Helper()
	_, prefix := layout.Open(st)
	return scan(tb, st, prefix+"*"+strings.TrimSuffix(it.Base().Tag(), "}")+":b*")
}

// Sale reads every field of the item's (bucket's) sale hash (empty when missing).
func Sale(tb TB, st *stock.Store, it stock.Item) map[string]string {
	tb.Helper()
	v, err := Client(st).HGetAll(context.Background(), KeysOf(st, it).Sale).Result()
	if err != nil {
		tb.Fatalf("reading the sale of %s: %v", it, err)
	}
	return v
}

// scan lists the keys matching pattern, sorted.
func scan(tb TB, st *stock.Store, pattern string) []string {
	tb.Helper()
	var keys []string
	iter := Client(st).Scan(context.Background(), 0, pattern, 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		tb.Fatalf("scanning keys %s: %v", pattern, err)
	}
	slices.Sort(keys)
	return keys
}

// DropItem deletes every key of the item (bucket), as a Redis that lost the sale would, and counts them.
func DropItem(tb TB, st *stock.Store, it stock.Item) int {
	tb.Helper()
	_, prefix := layout.Open(st)
	keys := scan(tb, st, prefix+"*"+it.Tag()+"*")
	if len(keys) == 0 {
		return 0
	}
	if err := Client(st).Del(context.Background(), keys...).Err(); err != nil {
		tb.Fatalf("deleting the keys of %s: %v", it, err)
	}
	return len(keys)
}
