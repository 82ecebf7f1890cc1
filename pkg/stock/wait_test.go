package stock_test

import (
	"context"
	"errors"
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
	s, it := onSaleWaiting(t, pair.Primary.Addr, 2)
	ctx := context.Background()
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

// With a ReplicaWait a claim is answered only once a replica has it: the
// worker decides a reservation in Postgres on the strength of its claim,
// and a claim a failover loses lets the gateway's abort give the
// reservation back on the promoted replica. Claimed again on another
// connection while the replica is still away, it must fail again (whether
// WAIT on a connection that wrote nothing covers what others wrote differs
// between Redis versions, so the script writes an existing claim again).
func TestClaimWaitsForReplicas(t *testing.T) {
	pair := testenv.MustRedisPair(t)
	store := func() *stock.Store {
		rdb := redis.NewClient(&redis.Options{Addr: pair.Primary.Addr})
		t.Cleanup(func() { rdb.Close() })
		s := stock.New(rdb, "")
		// Long enough for a healthy replica on two loaded cores.
		if err := s.WaitForReplicas(stock.ReplicaWait{Replicas: 1, Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, fresh := store(), store()
	ctx := context.Background()
	it := stock.Item{ActivityID: 1, ItemID: 3}
	mustPreheat(t, s, openSale(it, 10, 1, 0))
	res, err := s.Reserve(ctx, stock.Reservation{Item: it, RequestID: "r1", OrderNo: "o1", UserID: 1, Quantity: 1,
		Fingerprint: stock.Fingerprint(1, 1, 3, 1), Event: []byte(`{"orderNo":"o1","quantity":1}`)})
	if err != nil || res.Outcome != stock.Reserved || res.Unreplicated {
		t.Fatalf("reserve with the replica running: %+v %v, want RESERVED, replicated", res, err)
	}
	refs := []stock.Ref{{RequestID: "r1", OrderNo: "o1"}}

	pair.Replica.Pause(t)
	_, err1 := s.ClaimEntries(ctx, it, refs)
	_, err2 := fresh.ClaimEntries(ctx, it, refs) // a connection that never wrote the claim
	pair.Replica.Resume(t)
	if !errors.Is(err1, stock.ErrUnreplicated) {
		t.Errorf("claim with the replica paused: %v, want ErrUnreplicated", err1)
	}
	if !errors.Is(err2, stock.ErrUnreplicated) {
		t.Errorf("the claim again, on another connection, with the replica still paused: %v, want ErrUnreplicated", err2)
	}

	claims, err := fresh.ClaimEntries(ctx, it, refs)
	if err != nil || len(claims) != 1 || claims[0].Status != stock.ClaimOK || claims[0].Entry == nil {
		t.Fatalf("claim with the replica back: %+v %v, want CLAIMED with its entry", claims, err)
	}
	// The replica has it: promoted, it answers a release of o1 CLAIMED.
	replica := redis.NewClient(&redis.Options{Addr: pair.Replica.Addr})
	defer replica.Close()
	if err := replica.Do(ctx, "replicaof", "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	out, err := stock.New(replica, "").Release(ctx, stock.Unproduced, stock.Release{Item: it, Ref: refs[0], UserID: 1, Quantity: 1})
	if err != nil || out != stock.Claimed {
		t.Errorf("release on the promoted replica: %s %v, want CLAIMED", out, err)
	}
}

// With a ReplicaWait a release is reported done only once a replica has
// it: the gateway tells its client "nothing was reserved" on the strength
// of it, and a release a failover loses brings the reservation back on the
// promoted replica — an order the client was told does not exist. With the
// replica away it returns what it did with ErrUnreplicated; run again once
// the replica is back, it is acknowledged and the promoted replica holds
// it released.
func TestReleaseWaitsForReplicas(t *testing.T) {
	t.Parallel()
	pair := testenv.MustRedisPair(t)
	s, it := onSaleWaiting(t, pair.Primary.Addr, 4)
	ctx := context.Background()
	res, err := s.Reserve(ctx, stock.Reservation{Item: it, RequestID: "r1", OrderNo: "o1", UserID: 1, Quantity: 1,
		Fingerprint: stock.Fingerprint(1, 1, 4, 1), Event: []byte(`{"orderNo":"o1","quantity":1}`)})
	if err != nil || res.Outcome != stock.Reserved || res.Unreplicated {
		t.Fatalf("reserve with the replica running: %+v %v, want RESERVED, replicated", res, err)
	}
	rel := stock.Release{Item: it, Ref: stock.Ref{RequestID: "r1", OrderNo: "o1"}, UserID: 1, Quantity: 1}

	pair.Replica.Pause(t)
	out, err := s.Release(ctx, stock.Unproduced, rel)
	pair.Replica.Resume(t)
	if out != stock.Released || !errors.Is(err, stock.ErrUnreplicated) {
		t.Fatalf("release with the replica paused: %s %v, want RELEASED with ErrUnreplicated", out, err)
	}
	testenv.WaitFor(t, 10*time.Second, "the release acknowledged once the replica is back", func() bool {
		_, err := s.Release(ctx, stock.Unproduced, rel)
		return err == nil
	})
	// The replica has it: promoted, it holds the stock given back.
	replica := redis.NewClient(&redis.Options{Addr: pair.Replica.Addr})
	defer replica.Close()
	if err := replica.Do(ctx, "replicaof", "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	if out, err := stock.New(replica, "").Release(ctx, stock.Unproduced, rel); err != nil || out == stock.Claimed || out == stock.Shown {
		t.Errorf("release again on the promoted replica: %s %v, want it released already", out, err)
	}
	n, err := stock.New(replica, "").BucketStocks(ctx, it, 1)
	if err != nil || n[0] == nil || *n[0] != 10 {
		t.Errorf("stock on the promoted replica: %v %v, want 10 (the unit given back)", n, err)
	}
}

// onSaleWaiting is a store on the primary at addr that waits for one
// replica (300 ms), and item itemID of activity 1 on sale there with 10
// units.
func onSaleWaiting(t *testing.T, addr string, itemID int64) (*stock.Store, stock.Item) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	s := stock.New(rdb, "")
	if err := s.WaitForReplicas(stock.ReplicaWait{Replicas: 1, Timeout: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	it := stock.Item{ActivityID: 1, ItemID: itemID}
	mustPreheat(t, s, openSale(it, 10, 1, 0))
	return s, it
}
