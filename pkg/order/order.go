// Package order owns the Postgres side: activities and their item stock,
// orders and their state machine, the idempotency table, the outbox of
// Redis compensations, the outbox of orders.status (order_events: every
// change of an order writes its event row in its own transaction), the
// records of replayed dead letters and the fencing tokens of package lock's
// locks (lock_fences, CheckFence). Every SQL statement is here, but
// pkg/database's migrations: others call typed methods (tests that must
// reach behind them use ordertest), and the store hands out no pool.
// One place decides what a batch of reservations does (DecideBatch). It
// never talks to Redis or Kafka.
//
// A statement that changes one row found by its key writes the condition
// a partial index is built on as (…) IS TRUE, e.g. order_no = $1 AND
// (status = 'UNPAID') IS TRUE: the planner then cannot match that index,
// and statistics taken while no row met its condition (no order unpaid, no
// compensation pending) cannot make it walk the whole index instead of the
// key's.
package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Order statuses. PENDING and REJECTED are never stored in orders: PENDING
// is a reservation not yet persisted, REJECTED a processed_requests outcome.
const (
	StatusPending  = "PENDING"
	StatusUnpaid   = "UNPAID"
	StatusPaid     = "PAID"
	StatusClosed   = "CLOSED"
	StatusRejected = "REJECTED"
)

// Rejection reasons.
const (
	ReasonDBStockMismatch    = "DB_STOCK_MISMATCH"
	ReasonDuplicateLiveOrder = "DUPLICATE_LIVE_ORDER"
	ReasonKeyReused          = "IDEMPOTENCY_KEY_REUSED"
	ReasonClosedUnpaid       = "CLOSED_UNPAID"
	ReasonInvalidEvent       = "INVALID_EVENT"
)

var (
	// ErrNotFound: no such activity or order.
	ErrNotFound = errors.New("not found")
	// ErrStockBelowSold: an activity update would set stock below what is sold.
	ErrStockBelowSold = errors.New("new stock is below the units already sold")
	// ErrBucketsFixed: an upsert would change the buckets of an item whose
	// first preheat began (finished or not).
	ErrBucketsFixed = errors.New("buckets cannot change once a preheat of the item began: " +
		"its Redis keys, reservations and orders are laid out by that count, and gateways keep it")
	// ErrItemPreheated: an update leaves out an item whose first preheat
	// began (finished or not).
	ErrItemPreheated = errors.New("a preheat of the item began, so it stays and the update must list it: " +
		"its Redis keys, reservations and orders rest on it (end the sale to stop it selling)")
	// ErrSaleEnded: an update would move the window of an activity the kill
	// switch ended.
	ErrSaleEnded = errors.New("the sale was ended by the kill switch and stays ended: " +
		"its window cannot move (put the goods on sale again as a new activity)")
)

// Store is the Postgres store.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore wraps a pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Activity is a sale with its items.
type Activity struct {
	ID           int64
	Name         string
	StartsAt     time.Time
	EndsAt       time.Time
	PerUserLimit int
	Items        []ItemStock
}

// ItemStock is one item's stock in an activity.
type ItemStock struct {
	ActivityID   int64
	ItemID       int64
	InitialStock int64
	Stock        int64
	Version      int64
	// Buckets is how many Redis buckets hold the item's stock (1: the plain
	// layout); 0 in an upsert keeps the stored count (1 for a new item).
	Buckets int
}

// UpsertActivity creates or updates an activity and its items. Changing an
// item's initial stock moves its remaining stock by the same amount; it is
// refused if that would go below zero (units already sold). An item the
// update leaves out is removed if no preheat of it began (nothing can have
// been reserved or ordered of it), else the update is refused
// (ErrItemPreheated); either refusal changes nothing. An activity the kill
// switch ended keeps its window: an update that would move it is refused
// (ErrSaleEnded), one that repeats it may change the rest. The check is in
// the upsert's own condition, judged on the row as it is once locked, so an
// end committed while this waited for the row is seen.
func (s *Store) UpsertActivity(ctx context.Context, a Activity) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	tag, err := tx.Exec(ctx, `
		INSERT INTO activities AS a (id, name, starts_at, ends_at, per_user_limit)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, starts_at = EXCLUDED.starts_at,
			ends_at = EXCLUDED.ends_at, per_user_limit = EXCLUDED.per_user_limit, updated_at = now()
		WHERE a.ended_at IS NULL OR (a.starts_at = EXCLUDED.starts_at AND a.ends_at = EXCLUDED.ends_at)`,
		a.ID, a.Name, a.StartsAt, a.EndsAt, a.PerUserLimit)
	if err != nil {
		return fmt.Errorf("upserting activity %d: %w", a.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("activity %d: %w", a.ID, ErrSaleEnded)
	}
	for _, it := range a.Items {
		if err := checkBuckets(ctx, tx, a.ID, it); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO item_stock AS s (activity_id, item_id, initial_stock, stock, buckets)
			VALUES ($1, $2, $3, $3, GREATEST($4, 1))
			ON CONFLICT (activity_id, item_id) DO UPDATE
				SET initial_stock = EXCLUDED.initial_stock,
				    stock = s.stock + (EXCLUDED.initial_stock - s.initial_stock),
				    buckets = CASE WHEN $4 > 0 THEN $4 ELSE s.buckets END,
				    version = s.version + 1, updated_at = now()
				WHERE s.stock + (EXCLUDED.initial_stock - s.initial_stock) >= 0`,
			a.ID, it.ItemID, it.InitialStock, it.Buckets)
		if err != nil {
			return fmt.Errorf("upserting item %d: %w", it.ItemID, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("item %d: %w", it.ItemID, ErrStockBelowSold)
		}
	}
	if err := dropItemsLeftOut(ctx, tx, a); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// dropItemsLeftOut removes the activity's items a is without, none if a
// preheat of one of them began. The row locks order it with BeginPreheat.
func dropItemsLeftOut(ctx context.Context, tx pgx.Tx, a Activity) error {
	listed := make([]int64, len(a.Items))
	for i, it := range a.Items {
		listed[i] = it.ItemID
	}
	left, err := queryAll[struct {
		ItemID    int64
		Preheated bool
	}](ctx, tx, "reading the items left out", `SELECT item_id, preheat_started_at IS NOT NULL FROM item_stock
		WHERE activity_id = $1 AND item_id <> ALL($2) ORDER BY item_id FOR UPDATE`, a.ID, listed)
	if err != nil {
		return err
	}
	for _, it := range left {
		if it.Preheated {
			return fmt.Errorf("item %d: %w", it.ItemID, ErrItemPreheated)
		}
	}
	if len(left) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM item_stock WHERE activity_id = $1 AND item_id <> ALL($2)`, a.ID, listed); err != nil {
			return fmt.Errorf("removing the items left out: %w", err)
		}
	}
	return nil
}

// checkBuckets refuses to change the buckets of an item once a preheat of
// it began, even one that failed part-way: its Redis keys may already be
// laid out by the old count (a later preheat would add the missing buckets
// beside a bucket 0 holding the whole stock), its live reservations and
// orders sit in the buckets that count routed them to, and gateways keep
// the count they learnt. The row lock orders it with BeginPreheat.
func checkBuckets(ctx context.Context, tx pgx.Tx, activityID int64, it ItemStock) error {
	if it.Buckets <= 0 {
		return nil
	}
	var cur int
	var preheated bool
	err := tx.QueryRow(ctx, `SELECT buckets, preheat_started_at IS NOT NULL FROM item_stock
		WHERE activity_id = $1 AND item_id = $2 FOR UPDATE`, activityID, it.ItemID).Scan(&cur, &preheated)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading buckets of item %d: %w", it.ItemID, err)
	}
	if preheated && cur != it.Buckets {
		return fmt.Errorf("item %d has %d buckets: %w", it.ItemID, cur, ErrBucketsFixed)
	}
	return nil
}

// GetActivity returns an activity with all its items.
func (s *Store) GetActivity(ctx context.Context, id int64) (Activity, error) {
	a := Activity{ID: id}
	err := s.pool.QueryRow(ctx, `SELECT name, starts_at, ends_at, per_user_limit FROM activities WHERE id = $1`, id).
		Scan(&a.Name, &a.StartsAt, &a.EndsAt, &a.PerUserLimit)
	if errors.Is(err, pgx.ErrNoRows) {
		return Activity{}, fmt.Errorf("activity %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Activity{}, fmt.Errorf("reading activity %d: %w", id, err)
	}
	a.Items, err = queryAll[ItemStock](ctx, s.pool, fmt.Sprintf("reading items of activity %d", id),
		`SELECT activity_id, item_id, initial_stock, stock, version, buckets FROM item_stock WHERE activity_id = $1 ORDER BY item_id`, id)
	if err != nil {
		return Activity{}, err
	}
	return a, nil
}

// ActivityCursor is where a page of ListActivities starts: after the
// activity with this start and id, in the listing's order.
type ActivityCursor struct {
	StartsAt time.Time
	ID       int64
}

// ListActivities is a page of activities, newest first — the latest start
// first, ties by the higher id — each with its items; after is the previous
// page's last activity (nil: the first page).
func (s *Store) ListActivities(ctx context.Context, limit int, after *ActivityCursor) ([]Activity, error) {
	var at *time.Time
	var id int64
	if after != nil {
		at, id = &after.StartsAt, after.ID
	}
	rows, err := s.pool.Query(ctx, `SELECT id, name, starts_at, ends_at, per_user_limit FROM activities
		WHERE $1::timestamptz IS NULL OR (starts_at, id) < ($1, $2)
		ORDER BY starts_at DESC, id DESC LIMIT $3`, at, id, limit)
	if err != nil {
		return nil, fmt.Errorf("listing activities: %w", err)
	}
	page, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Activity, error) {
		var a Activity
		err := row.Scan(&a.ID, &a.Name, &a.StartsAt, &a.EndsAt, &a.PerUserLimit)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing activities: %w", err)
	}
	if len(page) == 0 {
		return page, nil
	}
	ids := make([]int64, len(page))
	for i, a := range page {
		ids[i] = a.ID
	}
	items, err := queryAll[ItemStock](ctx, s.pool, "listing the activities' items",
		`SELECT activity_id, item_id, initial_stock, stock, version, buckets FROM item_stock WHERE activity_id = ANY($1) ORDER BY activity_id, item_id`, ids)
	if err != nil {
		return nil, err
	}
	byID := map[int64]int{}
	for i, a := range page {
		byID[a.ID] = i
	}
	for _, it := range items {
		i := byID[it.ActivityID]
		page[i].Items = append(page[i].Items, it)
	}
	return page, nil
}

// EndActivity is the kill switch's record: the activity's window ends at
// the earliest of its own end, at and the database's now (a sale not yet
// started ends a millisecond before that, its start moved there too, as
// stock.End does), and the activity with its new window is returned. Only
// ever moves the end earlier, so a repeat answers the first end. The end is
// truncated to the millisecond, the resolution of the sale window in Redis,
// so the two agree; and it is never after the database's now, so
// SaleNow, which reads that clock, says the sale is off at once however
// the caller's clock runs. It also marks the activity ended (ended_at, set
// once): from then on no update moves its window (UpsertActivity), so the
// end stays whatever races it.
func (s *Store) EndActivity(ctx context.Context, id int64, at time.Time) (Activity, error) {
	at = at.Truncate(time.Millisecond)
	_, err := s.pool.Exec(ctx, `UPDATE activities
		SET ends_at = LEAST(ends_at, e.at), starts_at = LEAST(starts_at, LEAST(ends_at, e.at) - interval '1 millisecond'),
			ended_at = COALESCE(ended_at, now()), updated_at = now()
		FROM (SELECT LEAST($2::timestamptz, date_trunc('milliseconds', now())) AS at) e
		WHERE id = $1 AND (ends_at > e.at OR starts_at > LEAST(ends_at, e.at) - interval '1 millisecond' OR ended_at IS NULL)`, id, at)
	if err != nil {
		return Activity{}, fmt.Errorf("ending activity %d: %w", id, err)
	}
	return s.GetActivity(ctx, id)
}

// ItemStockOf returns one item's stock row.
func (s *Store) ItemStockOf(ctx context.Context, activityID, itemID int64) (ItemStock, error) {
	var it ItemStock
	err := s.pool.QueryRow(ctx, `SELECT activity_id, item_id, initial_stock, stock, version, buckets
		FROM item_stock WHERE activity_id = $1 AND item_id = $2`, activityID, itemID).
		Scan(&it.ActivityID, &it.ItemID, &it.InitialStock, &it.Stock, &it.Version, &it.Buckets)
	if errors.Is(err, pgx.ErrNoRows) {
		return ItemStock{}, fmt.Errorf("item %d:%d: %w", activityID, itemID, ErrNotFound)
	}
	return it, err
}

// Order is an order row, or a rejected request seen as an order.
type Order struct {
	OrderNo    string
	RequestID  string
	UserID     int64
	ActivityID int64
	ItemID     int64
	Quantity   int
	Status     string
	Reason     string // REJECTED and CLOSED
	CreatedAt  time.Time
	// ReservedAt is when the gateway reserved it, the instant its payBy
	// counts from (zero for a rejected request).
	ReservedAt time.Time
	PaidAt     *time.Time
	ClosedAt   *time.Time
}

// GetOrder finds an order by number: the order row, or else the rejected
// request (or refused reservation of a reused requestId) that carried that
// number.
func (s *Store) GetOrder(ctx context.Context, orderNo string) (Order, error) {
	o := Order{OrderNo: orderNo}
	err := s.pool.QueryRow(ctx, `SELECT request_id, user_id, activity_id, item_id, quantity, status, COALESCE(close_reason, ''),
		created_at, reserved_at, paid_at, closed_at
		FROM orders WHERE order_no = $1`, orderNo).
		Scan(&o.RequestID, &o.UserID, &o.ActivityID, &o.ItemID, &o.Quantity, &o.Status, &o.Reason, &o.CreatedAt, &o.ReservedAt, &o.PaidAt, &o.ClosedAt)
	if err == nil {
		return o, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("reading order %s: %w", orderNo, err)
	}
	// A rejected request, or a reservation refused because its requestId
	// belongs to another one.
	err = s.pool.QueryRow(ctx, `SELECT request_id, user_id, activity_id, item_id, quantity, reason, processed_at
		FROM processed_requests WHERE order_no = $1 AND outcome = 'REJECTED'
		UNION ALL
		SELECT request_id, user_id, activity_id, item_id, quantity, reason, rejected_at
		FROM rejected_reservations WHERE order_no = $1
		LIMIT 1`, orderNo).
		Scan(&o.RequestID, &o.UserID, &o.ActivityID, &o.ItemID, &o.Quantity, &o.Reason, &o.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("order %s: %w", orderNo, ErrNotFound)
	}
	if err != nil {
		return Order{}, fmt.Errorf("reading request of order %s: %w", orderNo, err)
	}
	o.Status = StatusRejected
	return o, nil
}

// ItemSales is what an item's orders add up to.
type ItemSales struct {
	ItemID int64
	Sold   int64 // Σ quantity of UNPAID and PAID orders
	Closed int64 // Σ quantity of CLOSED orders
}

// SalesOf sums the orders of each item of an activity that has any.
func (s *Store) SalesOf(ctx context.Context, activityID int64) (map[int64]ItemSales, error) {
	rows, err := queryAll[ItemSales](ctx, s.pool, fmt.Sprintf("summing orders of activity %d", activityID), `
		SELECT item_id,
			COALESCE(sum(quantity) FILTER (WHERE status IN ('UNPAID', 'PAID')), 0)::bigint,
			COALESCE(sum(quantity) FILTER (WHERE status = 'CLOSED'), 0)::bigint
		FROM orders WHERE activity_id = $1 GROUP BY item_id`, activityID)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]ItemSales, len(rows))
	for _, r := range rows {
		out[r.ItemID] = r
	}
	return out, nil
}
