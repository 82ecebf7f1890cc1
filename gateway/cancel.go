package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order"
	"orderpipe/pkg/outbox"
	"orderpipe/pkg/stock"
)

type cancelRequest struct {
	UserID jsonInt64 `json:"userId"` // by value, as the schema's integer (jsonint.go)
}

// cancelOrder is POST /v1/orders/{orderNo}/cancel {"userId"}: the buyer
// gives an UNPAID order up. Postgres closes it with reason CANCELLED, gives
// its units back to item_stock and writes the compensation and the status
// event in one transaction (order.Store.Cancel); the compensation is then
// applied here at once, so the unit and the user's limit marker are back in
// Redis before the answer — or, if Redis fails now, by the worker's sweep
// within seconds; the release script applies it exactly once either way.
//
// Idempotent: a cancelled order answers the same 200 again. A paid order is
// 409 ORDER_PAID, one the closer closed 409 ORDER_CLOSED (its stock is back
// already; it was not cancelled), a rejected request's number 409
// ORDER_REJECTED, a reservation not persisted yet 409 ORDER_PENDING (retry),
// and an unknown order or another user's 404 ORDER_NOT_FOUND. With an
// Idempotency-Key the key's first answer is given again (idemkey.go).
func (s *Server) cancelOrder(w http.ResponseWriter, r *http.Request) {
	var req cancelRequest
	if !decodeBody(w, r, MaxBodyBytes, &req) {
		return
	}
	if req.UserID <= 0 {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "userId must be a positive integer")
		return
	}
	orderNo, item, ok := orderFromPath(w, r)
	if !ok {
		return
	}
	s.withKey(w, r, cancelFingerprint(orderNo, int64(req.UserID)), func(w http.ResponseWriter) {
		s.cancel(w, r, orderNo, item, int64(req.UserID))
	})
}

// cancel is cancelOrder's work, once its key (if any) is held.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request, orderNo string, item stock.Item, userID int64) {
	var comp *order.Compensation
	cancel := func() error {
		return s.inPostgres(r.Context(), func(ctx context.Context) error {
			var err error
			_, comp, err = s.deps.Orders.Cancel(ctx, orderNo, userID)
			return err
		})
	}
	err := cancel()
	if errors.Is(err, order.ErrNotFound) {
		var done bool
		if done, err = s.whenNotPersisted(w, r, item, orderNo, func(raw []byte) bool { return userOf(raw) == userID }, cancel); done {
			return
		}
	}
	if err != nil {
		s.writeChangeError(w, r, err, "cancelling order", orderNo,
			conflict{err: order.ErrOrderPaid, Code: "ORDER_PAID", Message: "order is paid; it can no longer be cancelled"},
			conflict{err: order.ErrOrderClosed, Code: "ORDER_CLOSED", Message: "order was closed unpaid by the payment timeout; its stock was released"},
			conflict{err: order.ErrOrderRejected, Code: "ORDER_REJECTED", Message: "the order request was rejected; there is no order to cancel"})
		return
	}
	if comp != nil {
		s.giveBack(r.Context(), *comp)
	}
	writeJSON(w, http.StatusOK, client.Cancelled{OrderNo: orderNo, Status: order.StatusClosed, Reason: order.ReasonCancelled})
}

// giveBack applies a cancel's compensation (release script, then the row
// marked applied). A failure is only logged: the row stays pending and the
// worker's sweep applies it.
func (s *Server) giveBack(ctx context.Context, c order.Compensation) {
	a := &outbox.Applier{Orders: s.deps.Orders, Stock: s.deps.Stock, Log: s.deps.Log}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ReserveTimeout+pgTimeout)
	defer cancel()
	res, err := a.Apply(ctx, []order.Compensation{c})
	if err != nil || res.Failed > 0 {
		s.deps.Log.WarnContext(ctx, "giving a cancelled order's stock back in Redis failed; the sweep retries", "order_no", c.OrderNo, "err", err)
		return
	}
	s.deps.Metrics.CompensationsApplied.Add(float64(res.Applied))
}

// userOf is the user of a reservation's event (0 if it does not decode).
func userOf(raw []byte) int64 {
	var ev struct {
		UserID int64 `json:"userId"`
	}
	if json.Unmarshal(raw, &ev) != nil {
		return 0
	}
	return ev.UserID
}
