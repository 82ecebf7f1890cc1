package gateway

import (
	"context"
	"net/http"
	"time"

	"orderpipe/pkg/clock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// endSale is the kill switch, POST /admin/v1/activities/{activityId}/end:
// the sale stops taking orders on every gateway from the next reserve
// script on (each bucket's window in Redis ends), and its end becomes now
// in Postgres; orders already accepted go on as usual (the worker, pay, the
// closer and the reconciler do not look at the window). Postgres first, so
// the lost-sale check, the reconciler (whose fix rebuilds Redis's window
// from Postgres) and a later preheat all see the sale as over before Redis
// stops selling it; then Redis, whose clock decides a reserve: where it is
// behind Postgres's end, the earlier end is recorded in Postgres too and
// every bucket gets it, so the two agree to the millisecond. The update of
// the activity's row waits while a preheat arms its items (it holds the row
// FOR SHARE, order.Store.WithSaleWindow), so this ends what that armed; a
// preheat after it arms the ended window. Every step only
// moves the end earlier: a repeat, or a retry after a failure, finishes the
// job and answers the first end.
func (s *Server) endSale(w http.ResponseWriter, r *http.Request, a order.Activity) {
	ctx := r.Context()
	caller := []any{"activity_id", a.ID, "remote_addr", r.RemoteAddr, "forwarded_for", r.Header.Get("X-Forwarded-For"),
		"user_agent", r.UserAgent()}
	end := func(at time.Time) bool {
		if err := s.inPostgres(ctx, func(ctx context.Context) error {
			var err error
			a, err = s.deps.Orders.EndActivity(ctx, a.ID, at)
			return err
		}); err != nil {
			s.deps.Log.ErrorContext(ctx, "ending a sale: recording the end", append(caller, "err", err)...)
			writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE",
				"order store unavailable; the sale may still be selling: retry (ending a sale is idempotent)")
			return false
		}
		return true
	}
	armed := func() (time.Time, bool) {
		sales := make([]stock.Sale, len(a.Items))
		for i, it := range a.Items {
			sales[i] = stock.Sale{Item: stock.Item{ActivityID: a.ID, ItemID: it.ItemID}, Buckets: it.Buckets}
		}
		var earliest time.Time
		if err := s.inRedisWithin(ctx, time.Duration(stock.ScriptRoundTrips(sales))*s.cfg.ReserveTimeout, func(ctx context.Context) error {
			var err error
			earliest, _, err = s.deps.Stock.End(ctx, sales, a.EndsAt)
			return err
		}); err != nil {
			s.deps.Log.ErrorContext(ctx, "ending a sale in Redis", append(caller, "items", len(sales), "err", err)...)
			writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE",
				"stock service unavailable; the end is recorded but the sale may still be selling: retry (ending a sale is idempotent)")
			return time.Time{}, false
		}
		return earliest, true
	}
	if !end(clock.Now()) {
		return
	}
	earliest, ok := armed()
	if !ok {
		return
	}
	if !earliest.IsZero() && earliest.Before(a.EndsAt) {
		// Redis's clock is behind the end just recorded: record its end,
		// and give it to every bucket.
		if !end(earliest) {
			return
		}
		if _, ok := armed(); !ok {
			return
		}
	}
	s.deps.Log.InfoContext(ctx, "sale ended by the admin API", append(caller, "ends_at", a.EndsAt)...)
	writeJSON(w, http.StatusOK, viewOfActivity(a))
}
