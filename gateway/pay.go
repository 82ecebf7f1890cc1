package gateway

import (
	"context"
	"errors"
	"net/http"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

type orderPaid struct {
	OrderNo string `json:"orderNo"`
	Status  string `json:"status"`
}

// payOrder is POST /v1/orders/{orderNo}/pay: UNPAID → PAID, idempotent.
// A closed order answers 409 ORDER_CLOSED, a reservation not yet persisted
// 409 ORDER_PENDING (retry), a rejected request's number 409 ORDER_REJECTED.
// With an Idempotency-Key the key's first answer is given again (idemkey.go).
func (s *Server) payOrder(w http.ResponseWriter, r *http.Request) {
	orderNo, item, ok := orderFromPath(w, r)
	if !ok {
		return
	}
	s.withKey(w, r, payFingerprint(orderNo), func(w http.ResponseWriter) { s.pay(w, r, orderNo, item) })
}

// pay is payOrder's work, once its key (if any) is held.
func (s *Server) pay(w http.ResponseWriter, r *http.Request, orderNo string, item stock.Item) {
	pay := func() error {
		return s.inPostgres(r.Context(), func(ctx context.Context) error {
			_, err := s.deps.Orders.Pay(ctx, orderNo)
			return err
		})
	}
	err := pay()
	if errors.Is(err, order.ErrNotFound) {
		// Maybe still only reserved: the worker has not persisted it yet.
		var found bool
		perr := s.inRedis(r.Context(), func(ctx context.Context) error {
			var err error
			_, found, err = s.deps.Stock.Pending(ctx, item, orderNo)
			return err
		})
		if perr != nil {
			s.deps.Log.ErrorContext(r.Context(), "looking up pending order", "order_no", orderNo, "err", perr)
			writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "stock service unavailable")
			return
		}
		if !found {
			writeError(w, http.StatusNotFound, "ORDER_NOT_FOUND", "no such order")
			return
		}
		// The dedup record outlives the commit, and the worker may have
		// committed between the two reads: Postgres wins.
		err = pay()
		if errors.Is(err, order.ErrNotFound) {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusConflict, "ORDER_PENDING", "order is not persisted yet; retry shortly")
			return
		}
	}
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, orderPaid{OrderNo: orderNo, Status: order.StatusPaid})
	case errors.Is(err, order.ErrOrderClosed):
		writeError(w, http.StatusConflict, "ORDER_CLOSED", "order was closed unpaid; its stock was released")
	case errors.Is(err, order.ErrOrderRejected):
		writeError(w, http.StatusConflict, "ORDER_REJECTED", "the order request was rejected; there is no order to pay")
	default:
		s.deps.Log.ErrorContext(r.Context(), "paying order", "order_no", orderNo, "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable")
	}
}
