package gateway

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// Bucketed stock (pkg/stock/buckets.go): an item's stock may be split over B
// buckets. The gateway learns B with the item's sale (bucket 0's sale hash)
// on its first request for the item and keeps it for good. That is safe
// because B never changes once it can be seen: Postgres fixes it before a
// preheat writes any Redis key and refuses to change it afterwards, even
// after a preheat that failed part-way (409 BUCKETS_FIXED), and the sale
// hash that carries it is written last (admin.go, preheat). Were B allowed
// to change, a gateway keeping the old count would route a user to another
// bucket than a fresh gateway: one requestId, two reservations. A user
// always lands in the same bucket, so the one script keeps the per-user
// limit exact. A request that read the item before its sale was armed is
// routed as one bucket; the reserve script checks the count it was routed
// by against the sale's and answers the right one instead of reserving
// (stock.WrongBuckets), and the request is routed again (reroute).

// route picks the bucket of the request's user and says by which bucket
// count; on a Redis failure it has answered 503 (nothing was reserved) and
// returns false. An item not on sale yet is routed as one bucket: the
// reserve script answers NOT_ON_SALE, or, when the sale was armed since,
// its count (WrongBuckets), and the caller routes again (reroute).
func (s *Server) route(ctx context.Context, w http.ResponseWriter, req orderRequest) (stock.Item, int, bool) {
	item := stock.Item{ActivityID: req.ActivityID, ItemID: req.ItemID}
	if b, ok := s.buckets.Load(item); ok {
		return item.ForUser(req.UserID, b.(int)), b.(int), true
	}
	if trace.SpanFromContext(ctx).IsRecording() {
		// The lookup's span is part of the request's trace.
		ctx = telemetry.WithOrder(ctx, req.RequestID, "")
	}
	var n int
	var known bool
	err := s.inRedis(ctx, func(ctx context.Context) error {
		var err error
		n, known, err = s.deps.Stock.Buckets(ctx, item)
		return err
	})
	if err != nil {
		s.deps.Log.ErrorContext(ctx, "reading the item's buckets failed", "request_id", req.RequestID, "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "stock service unavailable, nothing was reserved; retry with the same requestId")
		return item, 0, false
	}
	if known {
		// Not preheated: not remembered (the script answers NOT_ON_SALE, and
		// the item may be preheated with more buckets later).
		s.buckets.Store(item, n)
	}
	return item.ForUser(req.UserID, n), n, true
}

// reroute is route again once the reserve script answered the sale's
// bucket count (WrongBuckets), which is then kept for good like one read.
func (s *Server) reroute(req orderRequest, n int) stock.Item {
	item := stock.Item{ActivityID: req.ActivityID, ItemID: req.ItemID}
	s.buckets.Store(item, n)
	return item.ForUser(req.UserID, n)
}

// withBucket names the bucket in an order number ("-b<bucket>" for bucket
// b > 0), so GET finds a pending reservation's keys from the number alone.
func withBucket(orderNo string, bucket int) string {
	if bucket == 0 {
		return orderNo
	}
	return orderNo + "-b" + strconv.Itoa(bucket)
}
