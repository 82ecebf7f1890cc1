package gateway

import (
	"context"
	"errors"
	"net/http"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

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
		var done bool
		if done, err = s.whenNotPersisted(w, r, item, orderNo, nil, pay); done {
			return
		}
	}
	if err != nil {
		s.writeChangeError(w, r, err, "paying order", orderNo,
			conflict{err: order.ErrOrderClosed, Code: "ORDER_CLOSED", Message: "order was closed unpaid; its stock was released"},
			conflict{err: order.ErrOrderRejected, Code: "ORDER_REJECTED", Message: "the order request was rejected; there is no order to pay"})
		return
	}
	writeJSON(w, http.StatusOK, client.Paid{OrderNo: orderNo, Status: order.StatusPaid})
}

// conflict is the 409 a pay or a cancel is answered when the order store
// refuses it with err.
type conflict struct {
	err           error
	Code, Message string
}

// writeChangeError answers err, a pay's or a cancel's: the first of
// conflicts it is, or else 503 (the store failed), logged as doing.
func (s *Server) writeChangeError(w http.ResponseWriter, r *http.Request, err error, doing, orderNo string, conflicts ...conflict) {
	for _, c := range conflicts {
		if errors.Is(err, c.err) {
			writeError(w, http.StatusConflict, c.Code, c.Message)
			return
		}
	}
	s.deps.Log.ErrorContext(r.Context(), doing, "order_no", orderNo, "err", err)
	writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable")
}

// whenNotPersisted answers a pay or cancel of an order Postgres does not
// know, which may still be only reserved (the worker has not persisted it
// yet): 503 if Redis cannot say, 404 ORDER_NOT_FOUND unless Redis holds its
// reservation — and, with mine set, one mine says is the caller's (only
// the buyer's own reservation is told apart from none). Otherwise the
// change is tried again, as the worker may have committed between the two
// reads (Postgres wins), and if Postgres still does not know the order,
// 409 ORDER_PENDING with Retry-After. done: an answer was written; else
// err is the retried change's.
func (s *Server) whenNotPersisted(w http.ResponseWriter, r *http.Request, item stock.Item, orderNo string,
	mine func(raw []byte) bool, again func() error) (done bool, err error) {
	var raw []byte
	var found bool
	perr := s.inRedis(r.Context(), func(ctx context.Context) error {
		var err error
		raw, found, err = s.deps.Stock.Pending(ctx, item, orderNo)
		return err
	})
	if perr != nil {
		s.deps.Log.ErrorContext(r.Context(), "looking up pending order", "order_no", orderNo, "err", perr)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "stock service unavailable")
		return true, nil
	}
	if !found || mine != nil && !mine(raw) {
		writeError(w, http.StatusNotFound, "ORDER_NOT_FOUND", "no such order")
		return true, nil
	}
	err = again()
	if errors.Is(err, order.ErrNotFound) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusConflict, "ORDER_PENDING", "order is not persisted yet; retry shortly")
		return true, nil
	}
	return false, err
}
