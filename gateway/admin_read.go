package gateway

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"orderpipe/gateway/client"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// getActivity answers an activity's state. Postgres is the truth and must
// answer (else 503); Redis only adds its projection: when it is unreachable
// the answer still comes, with "redis":"unavailable" and the Redis numbers
// null, because this is what an operator reads during a Redis incident.
//
// The two stores are read one after the other, not atomically: under load
// stock - redisStock may differ from inFlight by the orders moving meanwhile.
// The reconciler is the exact check (it reads under the item's row lock).
func (s *Server) getActivity(w http.ResponseWriter, r *http.Request, a order.Activity) {
	v, err := s.statusOf(r.Context(), a)
	if err != nil {
		s.deps.Log.Error("reading activity sales", "activity_id", a.ID, "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable")
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// statusOf is an activity's numbers from both stores; an error is
// Postgres's (Redis unavailable is "redis":"unavailable").
func (s *Server) statusOf(ctx context.Context, a order.Activity) (client.ActivityStatus, error) {
	id := a.ID
	// Redis first: an entry the worker commits after this read is then
	// counted as sold by the Postgres reads below, not missed by both.
	snaps := make([]stock.Snapshot, len(a.Items))
	redisOK := true
	for i, it := range a.Items {
		err := s.inRedis(ctx, func(ctx context.Context) error {
			var err error
			snaps[i], err = s.deps.Stock.SnapshotBuckets(ctx, stock.Item{ActivityID: id, ItemID: it.ItemID}, it.Buckets)
			return err
		})
		if err != nil {
			s.deps.Log.Warn("reading activity from redis", "activity_id", id, "item_id", it.ItemID, "err", err)
			redisOK = false
			break
		}
	}
	var rids []string
	for _, sn := range snaps {
		for _, e := range sn.Journal {
			rids = append(rids, e.RequestID)
		}
	}
	var sales map[int64]order.ItemSales
	var processed map[string]order.Processed
	err := s.inPostgres(ctx, func(ctx context.Context) error {
		var err error
		if sales, err = s.deps.Orders.SalesOf(ctx, id); err != nil {
			return err
		}
		processed, err = s.deps.Orders.ProcessedAmong(ctx, rids)
		return err
	})
	if err != nil {
		return client.ActivityStatus{}, err
	}
	v := client.ActivityStatus{ActivityInfo: infoOf(a), Redis: "ok", Items: make([]client.ItemStatus, 0, len(a.Items))}
	if !redisOK {
		v.Redis = "unavailable"
	}
	for i, it := range a.Items {
		st := client.ItemStatus{ItemID: it.ItemID, InitialStock: it.InitialStock, Stock: it.Stock,
			Sold: sales[it.ItemID].Sold, Closed: sales[it.ItemID].Closed}
		if redisOK {
			st.RedisStock = snaps[i].Stock
			st.InFlight = new(int64)
			*st.InFlight = inFlight(snaps[i].Journal, processed)
		}
		v.Items = append(v.Items, st)
	}
	return v, nil
}

const (
	defaultActivityPage = 20
	maxActivityPage     = 100
)

// listActivities answers a page of activities, each as GET of it answers
// it, newest first (the latest startsAt first, ties by the higher id):
// ?limit=1..100 (default 20) and ?cursor=, the nextCursor of the page
// before. The cursor is opaque to clients: base64url of "<startsAt in unix
// µs>:<id>" of the page's last activity, so a page never repeats or skips
// one while activities are added.
func (s *Server) listActivities(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k, v := range q {
		if k != "limit" && k != "cursor" {
			writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "unknown query parameter "+strconv.Quote(k)+" (limit, cursor)")
			return
		}
		if len(v) > 1 {
			writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "query parameter "+strconv.Quote(k)+" given more than once")
			return
		}
	}
	limit := defaultActivityPage
	if q.Has("limit") {
		n, ok := positiveDecimal(q.Get("limit"))
		if !ok || n > maxActivityPage {
			writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "limit must be an integer from 1 to 100")
			return
		}
		limit = int(n)
	}
	var after *order.ActivityCursor
	if q.Has("cursor") {
		c, ok := parseActivityCursor(q.Get("cursor"))
		if !ok {
			writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "cursor is malformed: pass the nextCursor of the page before")
			return
		}
		after = &c
	}
	var page []order.Activity
	if err := s.inPostgres(r.Context(), func(ctx context.Context) error {
		var err error
		page, err = s.deps.Orders.ListActivities(ctx, limit+1, after)
		return err
	}); err != nil {
		s.deps.Log.Error("listing activities", "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable")
		return
	}
	v := client.ActivityPage{Activities: make([]client.ActivityStatus, 0, min(len(page), limit))}
	if len(page) > limit {
		page = page[:limit]
		last := page[limit-1]
		v.NextCursor = activityCursor(order.ActivityCursor{StartsAt: last.StartsAt, ID: last.ID})
	}
	for _, a := range page {
		st, err := s.statusOf(r.Context(), a)
		if err != nil {
			s.deps.Log.Error("reading activity sales", "activity_id", a.ID, "err", err)
			writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable")
			return
		}
		v.Activities = append(v.Activities, st)
	}
	writeJSON(w, http.StatusOK, v)
}

func activityCursor(c order.ActivityCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.StartsAt.UnixMicro(), 10) + ":" + strconv.FormatInt(c.ID, 10)))
}

func parseActivityCursor(s string) (order.ActivityCursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return order.ActivityCursor{}, false
	}
	at, id, ok := strings.Cut(string(raw), ":")
	us, err1 := strconv.ParseInt(at, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if !ok || err1 != nil || err2 != nil || n <= 0 {
		return order.ActivityCursor{}, false
	}
	return order.ActivityCursor{StartsAt: time.UnixMicro(us).UTC(), ID: n}, true
}

// inFlight is what the reconciler counts from a journal: the quantity of
// entries not committed as that order — not yet decided, or rejected and
// awaiting the compensation that drops the entry. With nothing moving,
// Postgres stock - Redis stock = inFlight (I5).
func inFlight(journal []stock.Entry, processed map[string]order.Processed) int64 {
	var n int64
	for _, e := range journal {
		if p, ok := processed[e.RequestID]; ok && p.Outcome == order.Created && p.OrderNo == e.OrderNo {
			continue
		}
		n += e.Quantity
	}
	return n
}
