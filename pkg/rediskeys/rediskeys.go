// Package rediskeys deletes the keys matching a pattern: SCAN a thousand at
// a time (quick even on a Redis holding millions of other keys) and UNLINK
// them in batches. It serves cleanups — the tests', the bench's and the
// chaos suite's — never the order path. It names no key: the caller gives
// the pattern (a test's or a bench run's prefix), or the names (Unlink). It is not part of
// pkg/stock because pkg/testenv uses it, and pkg/stock's own tests use
// pkg/testenv.
package rediskeys

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Delete unlinks every key matching pattern and says how many it unlinked.
// On a Redis Cluster it scans every primary.
func Delete(ctx context.Context, client redis.UniversalClient, pattern string) (int, error) {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return deleteOn(ctx, client, pattern, false)
	}
	var mu sync.Mutex
	total := 0
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := deleteOn(ctx, node, pattern, true)
		mu.Lock()
		total += n
		mu.Unlock()
		return err
	})
	return total, err
}

// deleteOn deletes on one server. A Cluster node refuses a multi-key UNLINK
// across hash slots, so there each key goes alone (pipelined).
func deleteOn(ctx context.Context, client redis.UniversalClient, pattern string, perKey bool) (int, error) {
	iter := client.Scan(ctx, 0, pattern, 1000).Iterator()
	batch := make([]string, 0, 500)
	n := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := unlink(ctx, client, perKey, batch); err != nil {
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
