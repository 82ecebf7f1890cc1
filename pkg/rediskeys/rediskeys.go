// Package rediskeys deletes the keys matching a pattern: SCAN a thousand at
// a time (quick even on a Redis holding millions of other keys) and UNLINK
// them in batches. It serves cleanups — the tests', the bench's and the
// chaos suite's — never the order path.
package rediskeys

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Delete unlinks every key matching pattern and says how many it unlinked.
func Delete(ctx context.Context, client *redis.Client, pattern string) (int, error) {
	iter := client.Scan(ctx, 0, pattern, 1000).Iterator()
	batch := make([]string, 0, 500)
	n := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := client.Unlink(ctx, batch...).Err(); err != nil {
			return fmt.Errorf("deleting keys matching %s: %w", pattern, err)
		}
		n += len(batch)
		batch = batch[:0]
		return nil
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return n, fmt.Errorf("scanning keys matching %s: %w", pattern, err)
	}
	return n, flush()
}
