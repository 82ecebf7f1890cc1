package stock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/testenv"
)

// order is an order request of user for it, as a gateway hands it over.
func order(it Item, requestID string, user int64) Order {
	return Order{ActivityID: it.ActivityID, ItemID: it.ItemID, UserID: user, Quantity: 1, RequestID: requestID,
		Fingerprint: Fingerprint(user, it.ActivityID, it.ItemID, 1), OrderNo: "o-" + requestID,
		EventFunc: func(it Item, orderNo string) []byte { return []byte(`{"orderNo":"` + orderNo + `"}`) }}
}

// TestSaleArmedAfterTheCountWasRead: a request that read the item's bucket
// count before the sale was armed (bucket 0's sale hash, which carries the
// count, is written last) was routed as one bucket. Its reserve must not
// take bucket 0's stock for a user of another bucket: the limit marker
// would sit where neither the per-user limit nor the reconciler looks, and
// the order's release would later run on the user's bucket. The script
// answers the count, and the Reserver reserves in the user's bucket, under
// an orderNo that names it.
func TestSaleArmedAfterTheCountWasRead(t *testing.T) {
	t.Parallel()
	r := testenv.MustRedis(t)
	st := New(r.Client, r.Prefix)
	it := Item{ActivityID: 1, ItemID: 2}
	ctx := context.Background()
	if _, err := st.Preheat(ctx, Sale{Item: it, Stock: 10, StartsAt: time.Now().Add(-time.Hour),
		EndsAt: time.Now().Add(time.Hour), Cap: 1, Buckets: 2}); err != nil {
		t.Fatal(err)
	}
	rs := NewReserver(st, 0, nil)
	// What a read of the count before the arming leaves.
	rs.counts.Store(it, 1)
	user := int64(1)
	for BucketOf(user, 2) != 1 {
		user++
	}
	a, err := rs.Reserve(ctx, order(it, "rb", user))
	if err != nil || a.Outcome != Reserved || a.Item.Bucket != 1 || !strings.HasSuffix(a.NewOrderNo, "-b1") ||
		string(a.Event) != `{"orderNo":"`+a.NewOrderNo+`"}` {
		t.Fatalf("reserve: %+v %v, want RESERVED in bucket 1 under an orderNo of bucket 1, with its event", a, err)
	}
	b1 := it
	b1.Bucket = 1
	if v, _ := r.Client.Get(ctx, st.keys(b1).Limit(user)).Result(); v != "rb" {
		t.Errorf("bucket 1's limit marker of user %d is %q, want rb", user, v)
	}
	if n, _ := r.Client.Exists(ctx, st.keys(it).Limit(user)).Result(); n != 0 {
		t.Errorf("bucket 0 holds a limit marker of user %d, who belongs to bucket 1", user)
	}
	left, err := st.BucketStocks(ctx, it, 2)
	if err != nil || *left[0] != 5 || *left[1] != 4 {
		t.Errorf("bucket stocks %v %v, want 5 and 4", left, err)
	}
	if n, ok := rs.counts.Load(it); !ok || n.(int) != 2 {
		t.Errorf("the Reserver routes the item by %v buckets now, want 2", n)
	}
}

// TestReserverRoutingFailsNotSent: when the item's bucket count cannot be
// read, no script ran, and the error says so (the gateway answers 503
// "nothing was reserved" without giving anything back).
func TestReserverRoutingFailsNotSent(t *testing.T) {
	t.Parallel()
	r := testenv.MustRedis(t)
	rs := NewReserver(New(r.Client, r.Prefix), 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rs.Reserve(ctx, order(Item{ActivityID: 1, ItemID: 3}, "rn", 1)); !errorsIsNotSent(err) {
		t.Fatalf("reserve with the count unreadable: %v, want ErrNotSent", err)
	}
}

func errorsIsNotSent(err error) bool { return err != nil && errors.Is(err, ErrNotSent) }
