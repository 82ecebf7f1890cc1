package invariant_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/invariant"
	"orderpipe/pkg/order"
	"orderpipe/pkg/order/ordertest"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
	"orderpipe/pkg/testenv"
)

// TestCheckFindsEachViolation stages a small consistent sale in Postgres
// and Redis, breaks one thing per case, and checks that exactly the broken
// invariants are reported. The last cases first take the orders table's
// own guards away (in this test's database), so the checker is seen not to
// rely on them.
func TestCheckFindsEachViolation(t *testing.T) {
	db := testenv.MustDatabase(t)
	rd := testenv.MustRedis(t)
	orders := order.NewStore(db.Pool)
	st, sr := stock.New(rd.Client, rd.Prefix), stocktest.On(rd.Client, rd.Prefix)
	c := &invariant.Checker{Orders: orders, Stock: st}
	// The same checker reading orders.status, for the I7 cases: a topic the
	// staged sale's states were never published on.
	k := testenv.MustKafka(t)
	topic := testenv.UniqueName("orders.status.")
	if err := event.EnsureTopics(context.Background(), k.Brokers, 1, 0, topic); err != nil {
		t.Fatal(err)
	}
	withStatus := *c
	withStatus.Status = &invariant.StatusTopic{Client: &kafka.Client{Addr: kafka.TCP(k.Brokers...), Timeout: 10 * time.Second}, Topic: topic, Wait: time.Second}

	type sale struct {
		id    int64
		it    stock.Item
		scope invariant.Scope
	}
	tests := []struct {
		name      string
		dropRules bool
		status    bool // check I7 too, on an empty orders.status
		breakFunc func(t *testing.T, s *sale)
		want      []string // the invariants reported
	}{
		{"Consistent", false, false, nil, nil},
		{"StatesNeverPublished", false, true, nil, []string{"I7"}},
		{"Oversold", false, false, func(t *testing.T, s *sale) {
			ordertest.SetStock(t, db.Pool, s.id, 1, 0)
			stocktest.SetStock(t, sr, s.it, 0)
		}, []string{"I1"}},
		{"RedisBelowZero", false, false, func(t *testing.T, s *sale) {
			stocktest.SetStock(t, sr, s.it, -1)
		}, []string{"I1", "I5"}},
		{"RedisStockDrift", false, false, func(t *testing.T, s *sale) {
			stocktest.SetStock(t, sr, s.it, 2)
		}, []string{"I5"}},
		{"RedisStockLost", false, false, func(t *testing.T, s *sale) {
			stocktest.DropSale(t, sr, s.it)
		}, []string{"I5"}},
		{"LimitMarkerMissing", false, false, func(t *testing.T, s *sale) {
			stocktest.DropMarker(t, sr, s.it, 2)
		}, []string{"I5"}},
		{"StrayLimitMarkerFoundByScan", false, false, func(t *testing.T, s *sale) {
			stocktest.SetMarker(t, sr, s.it, 3, "stray")
		}, []string{"I5"}},
		{"StrayLimitMarkerOfAKnownUser", false, false, func(t *testing.T, s *sale) {
			stocktest.SetMarker(t, sr, s.it, 3, "stray")
			s.scope.Users = []int64{1, 2, 3}
		}, []string{"I5"}},
		{"LimitMarkerInAnotherBucket", false, false, func(t *testing.T, s *sale) {
			// Two buckets: user 2 belongs to bucket 1, yet its live order's
			// marker is in bucket 0 (a reserve routed by a stale count).
			ordertest.SetBuckets(t, db.Pool, s.id, 1, 2)
			b1 := s.it
			b1.Bucket = 1
			stocktest.SetStock(t, sr, b1, 0)
			if stock.BucketOf(2, 2) != 1 || stock.BucketOf(1, 2) != 0 {
				t.Fatal("users 1 and 2 are no longer in buckets 0 and 1")
			}
		}, []string{"I5"}},
		{"LostOrderNo", false, false, func(t *testing.T, s *sale) {
			s.scope.Observed[fmt.Sprintf("%d-1-lost", s.id)] = "r-lost"
		}, []string{"I4"}},
		{"OrderNoOfAnotherRequest", false, false, func(t *testing.T, s *sale) {
			s.scope.Observed[fmt.Sprintf("%d-1-u1", s.id)] = "r-someone-else"
		}, []string{"I4"}},
		{"RequestAnsweredAnotherOrderNo", false, false, func(t *testing.T, s *sale) {
			s.scope.Observed[fmt.Sprintf("%d-1-other", s.id)] = fmt.Sprintf("a%d-u1", s.id)
		}, []string{"I3", "I4"}},
		{"CompensationPendingInFlight", false, false, func(t *testing.T, s *sale) {
			ordertest.PutPendingCompensation(t, db.Pool, s.id, 1, 3, fmt.Sprintf("a%d-u3", s.id), fmt.Sprintf("%d-1-u3", s.id))
		}, nil}, // in flight, a pending compensation is no violation
		{"CompensationPendingWhenDrained", false, false, func(t *testing.T, s *sale) {
			ordertest.PutPendingCompensation(t, db.Pool, s.id, 1, 3, fmt.Sprintf("a%d-u3", s.id), fmt.Sprintf("%d-1-u3", s.id))
			s.scope.Drained = true
		}, []string{"I5"}},
		{"SecondLiveOrder", true, false, func(t *testing.T, s *sale) {
			ordertest.PutOrder(t, db.Pool, s.id, order.SnapshotOrder{OrderNo: fmt.Sprintf("%d-1-u1b", s.id),
				RequestID: fmt.Sprintf("a%d-u1b", s.id), UserID: 1, ItemID: 1, Quantity: 1, Status: order.StatusUnpaid})
		}, []string{"I1", "I2"}},
		{"TwoOrdersOneRequest", true, false, func(t *testing.T, s *sale) {
			ordertest.PutOrder(t, db.Pool, s.id, order.SnapshotOrder{OrderNo: fmt.Sprintf("%d-1-again", s.id),
				RequestID: fmt.Sprintf("a%d-u1", s.id), UserID: 5, ItemID: 1, Quantity: 1, Status: order.StatusClosed, Closed: true})
		}, []string{"I3"}},
		{"PaidAndClosed", true, false, func(t *testing.T, s *sale) {
			ordertest.PutOrder(t, db.Pool, s.id, order.SnapshotOrder{OrderNo: fmt.Sprintf("%d-1-pc", s.id),
				RequestID: fmt.Sprintf("a%d-pc", s.id), UserID: 6, ItemID: 1, Quantity: 1, Status: order.StatusClosed, Paid: true, Closed: true})
		}, []string{"I6"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &sale{id: int64(100 + i)}
			s.it = stock.Item{ActivityID: s.id, ItemID: 1}
			s.scope = mustSmallSale(t, db, rd, s.id)
			if tt.dropRules {
				ordertest.DropOrderRules(t, db.Pool)
			}
			if tt.breakFunc != nil {
				tt.breakFunc(t, s)
			}
			checker := c
			if tt.status {
				checker = &withStatus
			}
			vs, err := checker.Check(context.Background(), s.scope)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range vs {
				if !slices.Contains(got, v.Invariant) {
					got = append(got, v.Invariant)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("reported %v, want %v:\n%v", got, tt.want, vs)
			}
		})
	}
}

// mustSmallSale stages activity id: item 1 with 3 units, users 1 and 2
// holding one live order each, user 3's request rejected (DB_STOCK_MISMATCH),
// one unit left in Postgres and Redis, each live order's limit marker set.
// It returns the scope a client that saw the three 2xx answers would check.
func mustSmallSale(t *testing.T, db testenv.Database, rd testenv.Redis, id int64) invariant.Scope {
	t.Helper()
	orders, sr := order.NewStore(db.Pool), stocktest.On(rd.Client, rd.Prefix)
	err := orders.UpsertActivity(context.Background(), order.Activity{ID: id, Name: "checker", StartsAt: time.Now(),
		EndsAt: time.Now().Add(time.Hour), PerUserLimit: 1, Items: []order.ItemStock{{ItemID: 1, InitialStock: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	ordertest.SetStock(t, db.Pool, id, 1, 1)
	it := stock.Item{ActivityID: id, ItemID: 1}
	stocktest.SetStock(t, sr, it, 1)
	scope := invariant.Scope{ActivityID: id, Observed: map[string]string{}}
	for user := int64(1); user <= 2; user++ {
		rid, no := fmt.Sprintf("a%d-u%d", id, user), fmt.Sprintf("%d-1-u%d", id, user)
		ordertest.PutOrder(t, db.Pool, id, order.SnapshotOrder{OrderNo: no, RequestID: rid, UserID: user, ItemID: 1, Quantity: 1,
			Status: order.StatusUnpaid})
		stocktest.SetMarker(t, sr, it, user, rid)
		scope.Observed[no] = rid
	}
	rid, no := fmt.Sprintf("a%d-u3", id), fmt.Sprintf("%d-1-u3", id)
	ordertest.PutRejected(t, db.Pool, id, 1, 3, rid, no, order.ReasonDBStockMismatch)
	scope.Observed[no] = rid
	return scope
}
