package stocktest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"orderpipe/pkg/stock"
)

// Dump reads every item's (bucket's) keys with their values, one sorted line each ("key=value", a hash's map, or "key:type").
func Dump(tb TB, r Redis) []string {
	tb.Helper()
	ctx := context.Background()
	rdb, prefix := r.Client, r.Prefix
	keys := scan(tb, r, prefix+"*{a*") // every item's hash tag (stock.Item.Tag)
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
func ItemKeys(tb TB, r Redis, it stock.Item) []string {
	tb.Helper()
	prefix := r.Prefix
	keys := append(scan(tb, r, prefix+"*"+it.Base().Tag()+"*"), BucketKeys(tb, r, it)...)
	slices.Sort(keys)
	return keys
}

// BucketKeys lists the keys of the item's buckets past the first (one bucket keeps the plain keys), sorted.
func BucketKeys(tb TB, r Redis, it stock.Item) []string {
	tb.Helper()
	prefix := r.Prefix
	return scan(tb, r, prefix+"*"+strings.TrimSuffix(it.Base().Tag(), "}")+":b*")
}

// Sale reads every field of the item's (bucket's) sale hash (empty when missing).
func Sale(tb TB, r Redis, it stock.Item) map[string]string {
	tb.Helper()
	v, err := r.Client.HGetAll(context.Background(), KeysOf(r, it).Sale).Result()
	if err != nil {
		tb.Fatalf("reading the sale of %s: %v", it, err)
	}
	return v
}

// scan lists the keys matching pattern, sorted.
func scan(tb TB, r Redis, pattern string) []string {
	tb.Helper()
	var keys []string
	iter := r.Client.Scan(context.Background(), 0, pattern, 1000).Iterator()
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
func DropItem(tb TB, r Redis, it stock.Item) int {
	tb.Helper()
	prefix := r.Prefix
	keys := scan(tb, r, prefix+"*"+it.Tag()+"*")
	if len(keys) == 0 {
		return 0
	}
	if err := r.Client.Del(context.Background(), keys...).Err(); err != nil {
		tb.Fatalf("deleting the keys of %s: %v", it, err)
	}
	return len(keys)
}
