package rediskeys

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Unlink unlinks the keys the caller names, 500 a call (each alone on a
// Redis Cluster, whose nodes refuse a multi-key UNLINK across hash slots):
// a cleanup that knows every name its run wrote walks no keyspace.
func Unlink(ctx context.Context, client redis.UniversalClient, names ...string) error {
	_, cluster := client.(*redis.ClusterClient)
	for start := 0; start < len(names); start += 500 {
		if err := unlink(ctx, client, cluster, names[start:min(start+500, len(names))]); err != nil {
			return fmt.Errorf("unlinking keys: %w", err)
		}
	}
	return nil
}

// unlink unlinks the keys in one call, or one by one in a pipeline.
func unlink(ctx context.Context, client redis.UniversalClient, perKey bool, keys []string) error {
	if !perKey {
		return client.Unlink(ctx, keys...).Err()
	}
	_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Unlink(ctx, k)
		}
		return nil
	})
	return err
}
