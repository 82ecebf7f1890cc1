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
		batch := names[start:min(start+500, len(names))]
		var err error
		if cluster {
			_, err = client.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range batch {
					p.Unlink(ctx, k)
				}
				return nil
			})
		} else {
			err = client.Unlink(ctx, batch...).Err()
		}
		if err != nil {
			return fmt.Errorf("unlinking keys: %w", err)
		}
	}
	return nil
}
