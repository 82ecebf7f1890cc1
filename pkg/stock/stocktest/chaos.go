package stocktest

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/stock"
)

// The helpers of the test tools that are not tests (the chaos suite and
// the bench's reconcilepass): they return errors instead of failing a test,
// as a fault runs on while Redis is cut.

// ShiftSaleStart moves the item's (bucket's) sale start by delta ms, if it
// has a sale (one unreadable is left alone): drift only a fix repairs.
func ShiftSaleStart(ctx context.Context, r Redis, it stock.Item, delta int64) error {
	sale := KeysOf(r, it).Sale
	if n, err := r.Client.Exists(ctx, sale).Result(); err != nil || n != 1 {
		return nil
	}
	return r.Client.HIncrBy(ctx, sale, "starts", delta).Err()
}

// BucketFence is the newest fencing token that claimed the bucket (0 when
// none did, or Redis lost it).
func BucketFence(ctx context.Context, r Redis, it stock.Item) (int64, error) {
	fence, err := r.Client.Get(ctx, KeysOf(r, it).Fence()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return fence, err
}

// HeldKeys names the item's (bucket's) stock and sale keys that Redis
// holds (one unreadable counts as not held).
func HeldKeys(ctx context.Context, r Redis, it stock.Item) []string {
	var held []string
	k := KeysOf(r, it)
	for _, key := range []string{k.Stock, k.Sale} {
		if n, err := r.Client.Exists(ctx, key).Result(); err == nil && n == 1 {
			held = append(held, key)
		}
	}
	return held
}

// Loss is what a Redis that lost an item's (bucket's) keys forgets of it:
// its stock, sale, journal and marker index, and the named users' markers,
// requests' dedup records, reservations' release guards and orderNos' maps.
type Loss struct {
	Item     stock.Item
	Users    []int64
	Requests []string // requestIds: their dedup records
	Fates    []string // orderNos: their release guards
	Orders   []string // orderNos: their orderNo → requestId maps
}

// Lose unlinks the keys of the losses by name in one MULTI (no SCAN walks a
// shared Redis) and says how many there were.
func Lose(ctx context.Context, r Redis, losses ...Loss) (int, error) {
	var keys []string
	for _, l := range losses {
		k := KeysOf(r, l.Item)
		keys = append(keys, k.Stock, k.Sale, k.Journal, k.MarkerIndex())
		for _, u := range l.Users {
			keys = append(keys, k.Limit(u))
		}
		for _, rid := range l.Requests {
			keys = append(keys, k.Req(rid))
		}
		for _, no := range l.Fates {
			keys = append(keys, k.Fate(no))
		}
		for _, no := range l.Orders {
			keys = append(keys, k.Order(no))
		}
	}
	pipe := r.Client.TxPipeline()
	var cmds []*redis.IntCmd
	for i := 0; i < len(keys); i += 1000 {
		cmds = append(cmds, pipe.Unlink(ctx, keys[i:min(i+1000, len(keys))]...))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("unlinking %d keys: %w", len(keys), err)
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n, nil
}

// Flush empties the store's Redis database: for a bench command that owns
// the Redis it is given.
func Flush(ctx context.Context, r Redis) error {
	return r.Client.FlushDB(ctx).Err()
}

// KeyCount is how many keys the store's Redis database holds.
func KeyCount(ctx context.Context, r Redis) (int64, error) {
	return r.Client.DBSize(ctx).Result()
}

// PopulateLookalikes makes the store's Redis database hold total keys (or
// more), the added ones dedup-record lookalikes of item like that match no
// limit marker (DEBUG POPULATE; keys that exist are skipped).
func PopulateLookalikes(ctx context.Context, r Redis, total int64, like stock.Item) error {
	return r.Client.Do(ctx, "DEBUG", "POPULATE", total, KeysOf(r, like).Req("r")).Err()
}
