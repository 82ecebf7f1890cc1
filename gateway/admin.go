package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"orderpipe/gateway/client"
	"orderpipe/pkg/clock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// admin guards a handler with the bearer token, compared in constant time.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	want := []byte(s.cfg.AdminToken)
	return func(w http.ResponseWriter, r *http.Request) {
		got := bearerToken(r)
		if subtle.ConstantTimeCompare(got, want) != 1 {
			unauthorized(w, "admin API needs Authorization: Bearer <ADMIN_TOKEN>")
			return
		}
		h(w, r)
	}
}

type activityBody struct {
	Name         string     `json:"name"`
	StartsAt     string     `json:"startsAt"` // RFC 3339, parsed by validActivity
	EndsAt       string     `json:"endsAt"`
	PerUserLimit jsonInt    `json:"perUserLimit"` // absent or 0: 1
	Items        []itemBody `json:"items"`
}

type itemBody struct {
	ItemID  jsonInt `json:"itemId"`
	Stock   jsonInt `json:"stock"`
	Buckets jsonInt `json:"buckets"` // absent: keep (1 for a new item)
}

func pathID(r *http.Request, name string) (int64, *apiError) {
	id, ok := positiveDecimal(r.PathValue(name))
	if !ok {
		return 0, invalid("%s must be a positive integer", name)
	}
	return id, nil
}

// positiveDecimal reads a positive int64 written as plain decimal digits, as
// this API writes ids: no sign, no leading zero, so one id has one spelling.
func positiveDecimal(s string) (int64, bool) {
	if s == "" || s[0] == '0' || !allDigits([]byte(s)) {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func (s *Server) putActivity(w http.ResponseWriter, r *http.Request) {
	id, apiErr := pathID(r, "activityId")
	if apiErr != nil {
		writeError(w, apiErr.Status, apiErr.Code, apiErr.Message)
		return
	}
	var body activityBody
	if !decodeBody(w, r, maxAdminBody, &body) {
		return
	}
	a, apiErr := validActivity(id, body)
	if apiErr != nil {
		writeError(w, apiErr.Status, apiErr.Code, apiErr.Message)
		return
	}
	err := s.inPostgres(r.Context(), func(ctx context.Context) error { return s.deps.Orders.UpsertActivity(ctx, a) })
	if errors.Is(err, order.ErrStockBelowSold) {
		writeError(w, http.StatusConflict, "STOCK_BELOW_SOLD", err.Error())
		return
	}
	if errors.Is(err, order.ErrBucketsFixed) {
		writeError(w, http.StatusConflict, "BUCKETS_FIXED", err.Error())
		return
	}
	if errors.Is(err, order.ErrItemPreheated) {
		writeError(w, http.StatusConflict, "ITEM_PREHEATED", err.Error())
		return
	}
	if errors.Is(err, order.ErrSaleEnded) {
		writeError(w, http.StatusConflict, "SALE_ENDED", err.Error())
		return
	}
	if err != nil {
		s.deps.Log.Error("upserting activity", "activity_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable")
		return
	}
	s.writeActivity(w, r, id)
}

// maxAdminBody bounds an activity upsert (1000 items fit easily).
const maxAdminBody = 1 << 20

// validActivity checks an upsert and builds the activity it describes.
func validActivity(id int64, b activityBody) (order.Activity, *apiError) {
	limit := b.PerUserLimit.v
	if limit == 0 {
		limit = 1
	}
	a := order.Activity{ID: id, Name: b.Name}
	var err error
	// RFC 3339 (and so the schema's date-time) lets T and Z be lower case;
	// time.Parse wants them upper case, and no other letter is valid.
	if a.StartsAt, err = time.Parse(time.RFC3339, strings.ToUpper(b.StartsAt)); err != nil {
		return a, invalid("startsAt must be an RFC 3339 time such as 2026-11-29T10:00:00Z")
	}
	if a.EndsAt, err = time.Parse(time.RFC3339, strings.ToUpper(b.EndsAt)); err != nil {
		return a, invalid("endsAt must be an RFC 3339 time such as 2026-11-29T11:00:00Z")
	}
	switch {
	case b.Name == "" || utf8.RuneCountInString(b.Name) > 200:
		return a, invalid("name must be 1-200 characters")
	// Blank: no visible character (white space, or only invisible format
	// characters such as U+200B ZERO WIDTH SPACE).
	case strings.IndexFunc(b.Name, func(r rune) bool { return unicode.IsGraphic(r) && !unicode.IsSpace(r) }) < 0:
		return a, invalid("name must not be blank")
	// U+FFFD: what encoding/json makes of an escaped lone surrogate (\ud800).
	// Line and paragraph separators (U+2028, U+2029) break a name's line.
	case strings.IndexFunc(b.Name, func(r rune) bool { return unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp) }) >= 0 ||
		!utf8.ValidString(b.Name) || strings.ContainsRune(b.Name, utf8.RuneError):
		return a, invalid("name must be printable text")
	case !a.EndsAt.After(a.StartsAt):
		return a, invalid("endsAt must be after startsAt")
	case limit < 1 || limit > 100:
		return a, invalid("perUserLimit must be between 1 and 100")
	case len(b.Items) == 0 || len(b.Items) > 1000:
		return a, invalid("items must hold 1-1000 items")
	}
	a.PerUserLimit = int(limit)
	seen := map[int64]bool{}
	for _, it := range b.Items {
		if it.ItemID.v <= 0 {
			return a, invalid("items[].itemId must be a positive integer")
		}
		if !it.Stock.set {
			return a, invalid("items[].stock is required")
		}
		if it.Stock.v < 0 || it.Stock.v > 1_000_000_000 {
			return a, invalid("items[].stock must be between 0 and 1000000000")
		}
		if seen[it.ItemID.v] {
			return a, invalid("items[].itemId must be unique: %d appears twice", it.ItemID.v)
		}
		buckets := 0
		if it.Buckets.set {
			if it.Buckets.v < 1 || it.Buckets.v > stock.MaxBuckets {
				return a, invalid("items[].buckets must be between 1 and %d", stock.MaxBuckets)
			}
			buckets = int(it.Buckets.v)
		}
		seen[it.ItemID.v] = true
		a.Items = append(a.Items, order.ItemStock{ActivityID: id, ItemID: it.ItemID.v, InitialStock: it.Stock.v, Buckets: buckets})
	}
	return a, nil
}

func (s *Server) writeActivity(w http.ResponseWriter, r *http.Request, id int64) {
	a, err := s.activity(r.Context(), id)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable")
		return
	}
	writeJSON(w, http.StatusOK, viewOfActivity(a))
}

// infoOf is what every answer about activity a begins with.
func infoOf(a order.Activity) client.ActivityInfo {
	return client.ActivityInfo{ActivityID: a.ID, Name: a.Name, StartsAt: a.StartsAt, EndsAt: a.EndsAt, PerUserLimit: a.PerUserLimit}
}

func viewOfActivity(a order.Activity) client.Activity {
	v := client.Activity{ActivityInfo: infoOf(a), Items: []client.ActivityItem{}}
	for _, it := range a.Items {
		iv := client.ActivityItem{ItemID: it.ItemID, InitialStock: it.InitialStock, Stock: it.Stock}
		if it.Buckets > 1 {
			iv.Buckets = it.Buckets
		}
		v.Items = append(v.Items, iv)
	}
	return v
}

// forActivity serves a route of one activity: h is given the activity
// {activityId} names, unless activityFromPath answered why there is none.
func (s *Server) forActivity(h func(http.ResponseWriter, *http.Request, order.Activity)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a, ok := s.activityFromPath(w, r); ok {
			h(w, r, a)
		}
	}
}

// activityFromPath reads the activity {activityId} names from Postgres, or
// answers why not (400 bad id, 404 ACTIVITY_NOT_FOUND, 503 UNAVAILABLE).
func (s *Server) activityFromPath(w http.ResponseWriter, r *http.Request) (order.Activity, bool) {
	id, apiErr := pathID(r, "activityId")
	if apiErr != nil {
		writeError(w, apiErr.Status, apiErr.Code, apiErr.Message)
		return order.Activity{}, false
	}
	a, err := s.activity(r.Context(), id)
	if errors.Is(err, order.ErrNotFound) {
		writeError(w, http.StatusNotFound, "ACTIVITY_NOT_FOUND", "no such activity")
		return order.Activity{}, false
	}
	if err != nil {
		s.deps.Log.ErrorContext(r.Context(), "reading activity", "activity_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable")
		return order.Activity{}, false
	}
	return a, true
}

// preheat puts an activity's items on sale in four steps, so that a
// preheat failing at any step leaves nothing on sale that Postgres does not
// know of, and a retry finishes it:
//
//  1. Postgres fixes each item's stock layout (BeginPreheat): from then on
//     its bucket count cannot change (409 BUCKETS_FIXED), so whatever a
//     preheat writes to Redis, now or on a retry, and the count a gateway
//     keeps (buckets.go) agree with Postgres;
//  2. Redis gets the stock keys (Load), which sell nothing by themselves;
//  3. Postgres records the items preheated (MarkPreheated): from then on
//     the reconciler, the mover and the lost-sale check watch them;
//  4. Redis gets the sale hashes (Arm): only now do the items sell.
//
// Stopped after step 3, an item Postgres calls preheated has no sale in
// Redis: its orders are answered 503 (lostsale.go) until a new preheat, or
// `orderpipe reconciler --once --fix`, writes it.
func (s *Server) preheat(w http.ResponseWriter, r *http.Request, a order.Activity) {
	// An ended sale is refused before anything changes, the layout too.
	if !a.EndsAt.Add(stock.StockGrace).After(clock.Now()) {
		writeError(w, http.StatusConflict, "SALE_ENDED", "the activity has ended")
		return
	}
	a, ok := s.beginPreheat(w, r, a.ID)
	if !ok {
		return
	}
	v := viewOfActivity(a)
	sales := salesOf(a)
	if !s.loadStock(w, r, sales, &v) || !s.markPreheated(w, r, a) || !s.armSales(w, r, a.ID, sales) {
		return
	}
	// This gateway sells what the preheat put on sale at once; the others
	// within VERDICT_TTL.
	s.reserver.Forget(a.ID)
	writeJSON(w, http.StatusOK, v)
}

// beginPreheat is step 1: Postgres fixes the items' stock layout and
// answers the activity as it stands now.
func (s *Server) beginPreheat(w http.ResponseWriter, r *http.Request, id int64) (order.Activity, bool) {
	var a order.Activity
	err := s.inPostgres(r.Context(), func(ctx context.Context) error {
		var err error
		a, err = s.deps.Orders.BeginPreheat(ctx, id)
		return err
	})
	if errors.Is(err, order.ErrNotFound) {
		writeError(w, http.StatusNotFound, "ACTIVITY_NOT_FOUND", "no such activity")
		return a, false
	}
	if err != nil {
		s.deps.Log.Error("beginning a preheat", "activity_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable; nothing was put on sale: retry (preheat is idempotent)")
		return a, false
	}
	return a, true
}

// salesOf is each item's sale as the activity a defines it.
func salesOf(a order.Activity) []stock.Sale {
	sales := make([]stock.Sale, len(a.Items))
	for i, it := range a.Items {
		sales[i] = stock.Sale{Item: stock.Item{ActivityID: a.ID, ItemID: it.ItemID}, Stock: it.Stock,
			StartsAt: a.StartsAt, EndsAt: a.EndsAt, Cap: a.PerUserLimit, Buckets: it.Buckets}
	}
	return sales
}

// loadStock is step 2: each item's stock keys, which sell nothing by
// themselves; v says of each item whether this preheat loaded it.
func (s *Server) loadStock(w http.ResponseWriter, r *http.Request, sales []stock.Sale, v *client.Activity) bool {
	for i, sale := range sales {
		var loaded bool
		err := s.inRedis(r.Context(), func(ctx context.Context) error {
			var err error
			loaded, err = s.deps.Stock.Load(ctx, sale)
			return err
		})
		if errors.Is(err, stock.ErrSaleOver) {
			writeError(w, http.StatusConflict, "SALE_ENDED", "the activity has ended")
			return false
		}
		if err != nil {
			s.deps.Log.Error("loading stock", "activity_id", sale.Item.ActivityID, "item_id", sale.Item.ItemID, "err", err)
			writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "stock service unavailable; nothing was put on sale: retry (preheat is idempotent)")
			return false
		}
		v.Items[i].Loaded = &loaded
	}
	return true
}

// markPreheated is step 3: Postgres records the items preheated.
func (s *Server) markPreheated(w http.ResponseWriter, r *http.Request, a order.Activity) bool {
	itemIDs := make([]int64, len(a.Items))
	for i, it := range a.Items {
		itemIDs[i] = it.ItemID
	}
	if err := s.inPostgres(r.Context(), func(ctx context.Context) error {
		return s.deps.Orders.MarkPreheated(ctx, a.ID, itemIDs...)
	}); err != nil {
		s.deps.Log.Error("marking preheated", "activity_id", a.ID, "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "order store unavailable; nothing was put on sale: retry (preheat is idempotent)")
		return false
	}
	return true
}

// armSales is step 4: each item's sale hash, after which it sells.
//
// The window armed is the one Postgres holds while it is armed, under a
// share lock on the activity's row: a kill switch that ended the sale
// since BeginPreheat read it is armed as ended, and one that comes now
// waits, then ends the sale this arms.
// Every item in few Redis round trips (stock.Store.ArmAll: two up to a
// thousand sale hashes each), REDIS_TIMEOUT each: an end waits behind
// this no longer.
func (s *Server) armSales(w http.ResponseWriter, r *http.Request, id int64, sales []stock.Sale) bool {
	var redisDown bool
	arming := time.Duration(stock.ScriptRoundTrips(sales)) * s.cfg.ReserveTimeout
	within := pgTimeout + arming
	err := s.inPostgresWithin(r.Context(), within, func(ctx context.Context) error {
		return s.deps.Orders.WithSaleWindow(ctx, id, func(ctx context.Context, now order.Activity) error {
			for i := range sales {
				sales[i].StartsAt, sales[i].EndsAt, sales[i].Cap = now.StartsAt, now.EndsAt, now.PerUserLimit
			}
			if err := s.inRedisWithin(ctx, arming, func(ctx context.Context) error { return s.deps.Stock.ArmAll(ctx, sales) }); err != nil {
				s.deps.Log.Error("putting items on sale", "activity_id", id, "items", len(sales), "err", err)
				redisDown = true
			}
			return nil // a Redis failure is not Postgres's: the window read stands
		})
	})
	if redisDown {
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE",
			"stock service unavailable; items may be partly on sale (the others are answered 503 until then): retry (preheat is idempotent)")
		return false
	}
	if err != nil {
		s.deps.Log.Error("putting items on sale: reading the sale window", "activity_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE",
			"order store unavailable; items may be partly on sale (the others are answered 503 until then): retry (preheat is idempotent)")
		return false
	}
	return true
}

func (s *Server) activity(ctx context.Context, id int64) (order.Activity, error) {
	var a order.Activity
	err := s.inPostgres(ctx, func(ctx context.Context) error {
		var err error
		a, err = s.deps.Orders.GetActivity(ctx, id)
		return err
	})
	return a, err
}
