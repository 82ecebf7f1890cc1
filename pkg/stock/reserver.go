package stock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/telemetry"
)

// Reserver is a gateway's way to the reserve script: it routes an order
// request to its user's bucket, names the attempt's orderNo after that
// bucket and runs the script, routing again when the script answers that
// the sale is split otherwise (WrongBuckets). A request crosses into the
// store once for all of it, and only the store decides which bucket (and
// so which keys and which orderNo) an order has.
//
// Bucketed stock (buckets.go): an item's stock may be split over B
// buckets. The Reserver learns B with the item's sale (bucket 0's sale
// hash) on its first request for the item and keeps it for good. That is
// safe because B never changes once it can be seen: Postgres fixes it
// before a preheat writes any Redis key and refuses to change it
// afterwards, even after a preheat that failed part-way, and the sale hash
// that carries it is written last. Were B allowed to change, a gateway
// keeping the old count would route a user to another bucket than a fresh
// gateway: one requestId, two reservations. A user always lands in the
// same bucket, so the one script keeps the per-user limit exact. A request
// that read the item before its sale was armed is routed as one bucket;
// the script checks the count it was routed by against the sale's and
// answers the right one instead of reserving, and the request is routed
// again.
type Reserver struct {
	store *Store
	// counts holds each preheated item's bucket count (Item with Bucket 0 → int).
	counts sync.Map
	// verdicts holds each bucket's verdict (verdict.go), kept ttl at most.
	verdicts sync.Map
	ttl      time.Duration
	known    *knownAsks
	now      func() time.Time // monotonic
}

// NewReserver is the Reserver of one gateway; it refuses new requests from
// a bucket's verdict for verdictTTL at most (verdict.go; 0: never, and at
// most MaxVerdictTTL), aged by monoNow (nil: time.Now), a clock no step
// of the wall clock moves.
func NewReserver(s *Store, verdictTTL time.Duration, monoNow func() time.Time) *Reserver {
	if monoNow == nil {
		monoNow = time.Now
	}
	return &Reserver{store: s, ttl: min(verdictTTL, MaxVerdictTTL), known: &knownAsks{rdb: s.rdb}, now: monoNow}
}

// Order is one order request as the gateway hands it to the store.
type Order struct {
	ActivityID, ItemID, UserID int64
	Quantity                   int
	RequestID                  string
	Fingerprint                string // of the payload (Fingerprint)
	// OrderNo is the attempt's order number before the store names its
	// bucket in it (BucketOrderNo).
	OrderNo string
	// EventFunc builds the event journaled (and produced) for the request
	// in bucket it under orderNo; called again when the request is routed
	// again.
	EventFunc   func(it Item, orderNo string) []byte
	TraceParent string // see Reservation.TraceParent
	ReplayOnly  bool   // see Reservation.ReplayOnly
	// asked: Refuse consulted the bucket's verdict for this order already,
	// so Reserve does not; renew is the verdict it picked this order to
	// renew, if any.
	asked bool
	renew *verdict
}

// Attempt is the script's answer with what the attempt was made as: the
// bucket, the orderNo and the event of a reservation to produce.
type Attempt struct {
	ReserveResult
	Item Item
	// FromVerdict: refused from the bucket's verdict; no script ran.
	FromVerdict bool
	// NewOrderNo is the orderNo the request is reserved under if it is
	// new (ReserveResult.OrderNo is the first reservation's).
	NewOrderNo string
	Event      []byte
}

// Reserve routes o and runs the reserve script (Store.Reserve) in its
// user's bucket. A failure to read the item's bucket count is ErrNotSent:
// no script ran.
func (r *Reserver) Reserve(ctx context.Context, o Order) (Attempt, error) {
	base := Item{ActivityID: o.ActivityID, ItemID: o.ItemID}
	n, err := r.count(ctx, base, o.RequestID)
	if err != nil {
		return Attempt{}, err
	}
	it := base.ForUser(o.UserID, n)
	renew := o.renew
	if !o.asked {
		var a Attempt
		var refused bool
		if a, refused, renew = r.refuseFromVerdict(ctx, o, it); refused {
			return a, nil
		}
	}
	if renew != nil {
		// Picked to renew the verdict; a new one replaces it, if any.
		defer renew.renewing.Store(false)
	}
	a, err := r.reserveIn(ctx, o, it, n)
	if err == nil && a.Outcome == WrongBuckets && ValidBuckets(int(a.Remaining)) {
		// The sale was armed between the read of its count and the
		// script: nothing was reserved; route by the count it answered,
		// which is kept for good like one read.
		n = int(a.Remaining)
		r.counts.Store(base, n)
		a, err = r.reserveIn(ctx, o, base.ForUser(o.UserID, n), n)
	}
	return a, err
}

// Refuse answers o from its bucket's verdict, when the verdict refuses it
// and Redis does not know its requestId (verdict.go), with no script run:
// the cheap answer to a flood. guard wraps the one Redis round trip it
// makes, if any (the gateway's breaker: a request with no verdict to
// consult makes none, and counts for nothing). err is the check's
// failure, which refuses nothing. ok false: Reserve decides, without
// consulting the verdict again.
func (r *Reserver) Refuse(ctx context.Context, o *Order, guard func(func() error) error) (a Attempt, ok bool, err error) {
	n, known := r.counts.Load(Item{ActivityID: o.ActivityID, ItemID: o.ItemID})
	if !known {
		return Attempt{}, false, nil
	}
	it := Item{ActivityID: o.ActivityID, ItemID: o.ItemID}.ForUser(o.UserID, n.(int))
	a, refused, renew, err := r.verdictAnswer(ctx, *o, it, guard)
	if !refused {
		o.asked, o.renew = true, renew
	}
	return a, refused, err
}

// reserveIn runs the script for o in bucket it, routed by n buckets.
func (r *Reserver) reserveIn(ctx context.Context, o Order, it Item, n int) (Attempt, error) {
	orderNo := BucketOrderNo(o.OrderNo, it.Bucket)
	if trace.SpanFromContext(ctx).IsRecording() {
		trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrOrderNo.String(orderNo))
		ctx = telemetry.WithOrder(ctx, o.RequestID, orderNo)
	}
	ev := o.EventFunc(it, orderNo)
	sentAt := r.now()
	res, err := r.store.Reserve(ctx, Reservation{
		Item: it, RequestID: o.RequestID, OrderNo: orderNo, UserID: o.UserID, Quantity: o.Quantity,
		Fingerprint: o.Fingerprint, Event: ev, TraceParent: o.TraceParent, ReplayOnly: o.ReplayOnly, Buckets: n,
	})
	if err == nil && r.ttl > 0 {
		r.learn(it, res, sentAt)
	}
	return Attempt{ReserveResult: res, Item: it, NewOrderNo: orderNo, Event: ev}, err
}

// count is the item's bucket count, read once per item. An item not
// preheated is routed as one bucket and not remembered: the script answers
// NOT_ON_SALE, or, once the sale is armed, its count (WrongBuckets).
func (r *Reserver) count(ctx context.Context, base Item, requestID string) (int, error) {
	if n, ok := r.counts.Load(base); ok {
		return n.(int), nil
	}
	if trace.SpanFromContext(ctx).IsRecording() {
		// The lookup's span is part of the request's trace.
		ctx = telemetry.WithOrder(ctx, requestID, "")
	}
	n, known, err := r.store.Buckets(ctx, base)
	if err != nil {
		return 0, fmt.Errorf("routing the request: %w: %w", ErrNotSent, err)
	}
	if known {
		r.counts.Store(base, n)
	}
	return n, nil
}

// BucketOrderNo names the bucket in an order number ("-b<bucket>" for
// bucket b > 0), so a lookup finds a pending reservation's keys from the
// number alone (event.ParseOrderNo).
func BucketOrderNo(orderNo string, bucket int) string {
	if bucket == 0 {
		return orderNo
	}
	return orderNo + "-b" + strconv.Itoa(bucket)
}
