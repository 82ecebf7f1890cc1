package gateway

import (
	"net/http"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order"
)

// payBy is the payment deadline of an order reserved at reservedAt (nil if
// that is unknown): reservedAt + CLOSE_AFTER. The worker stores reservedAt
// as the order's reserved_at, the closer closes only orders whose
// reserved_at is older than CLOSE_AFTER (plus CLOSE_GRACE) by the database
// clock, and the worker's UNPAID event shows the same sum: one instant
// everywhere. (created_at, GET's createdAt once persisted, is the later
// commit time: not what the deadline counts from.)
func (s *Server) payBy(reservedAt time.Time) *time.Time {
	if reservedAt.IsZero() {
		return nil
	}
	t := reservedAt.UTC().Add(s.cfg.CloseAfter)
	return &t
}

// orderView is o as GET answers it: with its payBy when it is a live unpaid
// order (PENDING or UNPAID); a paid, closed or rejected one has no deadline.
func (s *Server) orderView(o order.Order) client.Order {
	v := client.Order{OrderNo: o.OrderNo, RequestID: o.RequestID, UserID: o.UserID, ActivityID: o.ActivityID, ItemID: o.ItemID,
		Quantity: o.Quantity, Status: o.Status, Reason: o.Reason, CreatedAt: o.CreatedAt, PaidAt: o.PaidAt, ClosedAt: o.ClosedAt}
	if o.Status == order.StatusPending || o.Status == order.StatusUnpaid {
		v.PayBy = s.payBy(o.ReservedAt)
	}
	return v
}

// answerInProgress answers a retry whose first attempt is still running
// (its event not yet in Kafka): with an Idempotency-Key header, 409 as the
// draft says; without, 503 (the retry has already waited REPLAY_WAIT for
// the first attempt). Either way retrying with the same requestId is right.
func answerInProgress(w http.ResponseWriter, req orderRequest) {
	w.Header().Set("Retry-After", "1")
	if req.keyed {
		writeError(w, http.StatusConflict, "IDEMPOTENCY_KEY_IN_PROGRESS",
			"the first request with this Idempotency-Key is still in progress; retry with the same key after Retry-After")
		return
	}
	writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "the first attempt of this requestId is still in progress; retry with the same requestId")
}
