package bench

import (
	"context"
	"errors"
	"time"

	"orderpipe/pkg/redisconn"
	"orderpipe/pkg/rediskeys"
)

// PurgeKeys deletes every Redis key under prefix, which must not be empty:
// how `make bench` removes the keys of its throwaway pipeline.
func PurgeKeys(ctx context.Context, rc redisconn.Config, prefix string) (int, error) {
	if prefix == "" {
		return 0, errors.New("refusing to purge without a key prefix (REDIS_KEY_PREFIX is empty)")
	}
	rdb, err := rc.New(redisconn.Options{ReadTimeout: 5 * time.Second})
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	return rediskeys.Delete(ctx, rdb, prefix+"*")
}
