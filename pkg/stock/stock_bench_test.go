package stock_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// BenchmarkReserve measures the reserve script's round trip (EVALSHA) from
// Go against the test Redis: a successful reservation (every key written),
// the sold-out path, and many goroutines on one hot item.
func BenchmarkReserve(b *testing.B) {
	r := testenv.MustRedis(b)
	s := stock.New(r.Client, r.Prefix)
	ctx := context.Background()
	now := time.Now()
	hot := stock.Item{ActivityID: 1, ItemID: 10086}
	gone := stock.Item{ActivityID: 1, ItemID: 10087}
	for _, sale := range []stock.Sale{{Item: hot, Stock: 1 << 40}, {Item: gone, Stock: 0}} {
		sale.StartsAt, sale.EndsAt, sale.Cap = now.Add(-time.Minute), now.Add(time.Hour), 1
		if _, err := s.Preheat(ctx, sale); err != nil {
			b.Fatal(err)
		}
	}
	// An event of the size the gateway journals.
	event := []byte(`{"requestId":"r-7f3a9c2e-0001","orderNo":"1-10086-mf3k2x1a9c2e7f3a9c2e","userId":123456789,` +
		`"activityId":1,"itemId":10086,"quantity":1,"reservedAt":"2026-11-29T07:00:00.123456Z"}`)
	var seq atomic.Int64
	reserve := func(b *testing.B, it stock.Item, want stock.Outcome) {
		n := seq.Add(1)
		id := strconv.FormatInt(n, 36)
		res, err := s.Reserve(ctx, stock.Reservation{Item: it, RequestID: "r-" + id, OrderNo: "o-" + id, UserID: n,
			Quantity: 1, Fingerprint: id, Event: event})
		if err != nil {
			b.Fatal(err)
		}
		if res.Outcome != want {
			b.Fatalf("outcome %s, want %s", res.Outcome, want)
		}
	}
	b.Run("Reserved", func(b *testing.B) {
		for b.Loop() {
			reserve(b, hot, stock.Reserved)
		}
	})
	b.Run("SoldOut", func(b *testing.B) {
		for b.Loop() {
			reserve(b, gone, stock.SoldOut)
		}
	})
	b.Run("ReservedParallel", func(b *testing.B) {
		b.SetParallelism(16) // 16 × GOMAXPROCS goroutines on one hot item
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				reserve(b, hot, stock.Reserved)
			}
		})
	})
}
