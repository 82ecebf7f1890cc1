package stock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// A reserve with a ReplicaWait reports whether a replica acknowledged it:
// Unreplicated while the only replica is paused, not once it runs; a replay
// is behind the same WAIT (its "shown" mark is a write of this connection).
func TestReserveReportsUnreplicated(t *testing.T) {
	t.Parallel()
	pair := testenv.MustRedisPair(t)
	rdb := redis.NewClient(&redis.Options{Addr: pair.Primary.Addr})
	defer rdb.Close()
	s := stock.New(rdb, "")
	if err := s.WaitForReplicas(stock.ReplicaWait{Replicas: 1, Timeout: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	it := stock.Item{ActivityID: 1, ItemID: 2}
	now := time.Now()
	if _, err := s.Preheat(ctx, stock.Sale{Item: it, Stock: 10, StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Cap: 1}); err != nil {
		t.Fatal(err)
	}
	reserve := func(rid, orderNo string, user int64) stock.ReserveResult {
		t.Helper()
		res, err := s.Reserve(ctx, stock.Reservation{Item: it, RequestID: rid, OrderNo: orderNo, UserID: user, Quantity: 1,
			Fingerprint: stock.Fingerprint(user, 1, 2, 1), Event: []byte(`{"orderNo":"` + orderNo + `","quantity":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := reserve("r1", "o1", 1); res.Outcome != stock.Reserved || res.Unreplicated {
		t.Fatalf("replica running: %+v, want RESERVED, replicated", res)
	}
	if _, err := s.MarkPublished(ctx, it, []stock.Ref{{RequestID: "r1", OrderNo: "o1"}}); err != nil {
		t.Fatal(err)
	}
	pair.Replica.Pause(t)
	res2, res3 := reserve("r2", "o2", 2), reserve("r1", "o1-retry", 1)
	pair.Replica.Resume(t)
	if res2.Outcome != stock.Reserved || !res2.Unreplicated {
		t.Errorf("replica paused: %+v, want RESERVED, unreplicated", res2)
	}
	if res3.Outcome != stock.Replayed || !res3.Unreplicated {
		t.Errorf("replay with the replica paused: %+v, want REPLAYED, unreplicated", res3)
	}
	if res := reserve("r1", "o1-retry2", 1); res.Outcome != stock.Replayed || res.Unreplicated {
		t.Errorf("replay with the replica back: %+v, want REPLAYED, replicated", res)
	}
}
