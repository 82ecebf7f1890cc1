package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file is what the redrive and the reconciler read: which items have a
// sale in Redis, how requests were decided, and one item's state frozen by a
// lock on its stock row.

// BeginPreheat is a preheat's first step, before it writes anything to
// Redis: it fixes the stock layout (the bucket count) of every item of the
// activity not preheated before, in one transaction, and returns the
// activity with those items as they are now (the layout Redis must get).
// An item added concurrently is left for the next preheat.
func (s *Store) BeginPreheat(ctx context.Context, id int64) (Activity, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Activity{}, fmt.Errorf("beginning tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	a := Activity{ID: id}
	err = tx.QueryRow(ctx, `SELECT name, starts_at, ends_at, per_user_limit FROM activities WHERE id = $1`, id).
		Scan(&a.Name, &a.StartsAt, &a.EndsAt, &a.PerUserLimit)
	if errors.Is(err, pgx.ErrNoRows) {
		return Activity{}, fmt.Errorf("activity %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Activity{}, fmt.Errorf("reading activity %d: %w", id, err)
	}
	// Only rows not yet started are locked: a running sale's rows are the
	// workers' hot rows, and their layout is fixed already.
	if _, err := tx.Exec(ctx, `UPDATE item_stock SET preheat_started_at = now()
		WHERE activity_id = $1 AND preheat_started_at IS NULL`, id); err != nil {
		return Activity{}, fmt.Errorf("fixing the layout of activity %d: %w", id, err)
	}
	a.Items, err = queryAll[ItemStock](ctx, tx, fmt.Sprintf("reading items of activity %d", id),
		`SELECT activity_id, item_id, initial_stock, stock, version, buckets FROM item_stock
		WHERE activity_id = $1 AND preheat_started_at IS NOT NULL ORDER BY item_id`, id)
	if err != nil {
		return Activity{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Activity{}, fmt.Errorf("committing: %w", err)
	}
	return a, nil
}

// WithSaleWindow runs fn with the activity's sale window as Postgres holds
// it, read under a share lock on the activity's row that lasts until fn has
// returned: whatever fn writes into Redis is that window, and the kill
// switch's end (EndActivity, an update of the row) is ordered wholly before
// the read or wholly after fn, never between — a preheat cannot arm a window
// an end has already closed. The Activity has no Items.
func (s *Store) WithSaleWindow(ctx context.Context, id int64, fn func(ctx context.Context, a Activity) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	a := Activity{ID: id}
	err = tx.QueryRow(ctx, `SELECT name, starts_at, ends_at, per_user_limit FROM activities WHERE id = $1 FOR SHARE`, id).
		Scan(&a.Name, &a.StartsAt, &a.EndsAt, &a.PerUserLimit)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("activity %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("reading activity %d: %w", id, err)
	}
	if err := fn(ctx, a); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// MarkPreheated records that the items' stock is loaded into Redis: from
// now on the reconciler, the mover and the gateway's lost-sale check watch
// them. The first time is kept: nothing of the item sold before it, and a
// repeated preheat leaves a running sale's hot rows alone.
func (s *Store) MarkPreheated(ctx context.Context, activityID int64, itemIDs ...int64) error {
	_, err := s.pool.Exec(ctx, `UPDATE item_stock SET preheated_at = now(), preheat_started_at = COALESCE(preheat_started_at, now())
		WHERE activity_id = $1 AND item_id = ANY($2) AND preheated_at IS NULL`, activityID, itemIDs)
	if err != nil {
		return fmt.Errorf("marking items of activity %d preheated: %w", activityID, err)
	}
	return nil
}

// SaleItem is an activity item with its activity's sale window.
type SaleItem struct {
	ActivityID   int64
	ItemID       int64
	StartsAt     time.Time
	EndsAt       time.Time
	PerUserLimit int
	Buckets      int // Redis buckets of the item's stock (1: the plain layout)
}

// PreheatedItems lists the preheated items whose sale ends after now - grace
// (by the database clock): the items whose Redis keys must still exist.
func (s *Store) PreheatedItems(ctx context.Context, grace time.Duration) ([]SaleItem, error) {
	return s.saleItems(ctx, `s.preheated_at IS NOT NULL AND a.ends_at > now() - $1::interval`, grace)
}

// ActivitySale is what Postgres says of an activity's sale now.
type ActivitySale struct {
	// Open: the activity's window holds now, by the database clock.
	Open bool
	// StartsAt and EndsAt are the window as Postgres holds it, the one a
	// preheat writes into Redis (zero when the activity does not exist).
	StartsAt, EndsAt time.Time
	// Preheated are the items a preheat has put on sale.
	Preheated map[int64]bool
}

// OnSale reports whether item was preheated and the window holds: its Redis
// keys must exist, so a reserve that finds none means Redis lost them.
func (a ActivitySale) OnSale(itemID int64) bool { return a.Open && a.Preheated[itemID] }

// SaleNow is what Postgres says of activity id's sale now, every item in one
// query (the zero ActivitySale when there is no such activity).
func (s *Store) SaleNow(ctx context.Context, id int64) (ActivitySale, error) {
	var a ActivitySale
	var items []int64
	err := s.pool.QueryRow(ctx, `SELECT a.starts_at <= now() AND a.ends_at > now(), a.starts_at, a.ends_at,
		COALESCE(array_agg(s.item_id) FILTER (WHERE s.preheated_at IS NOT NULL), '{}')
		FROM activities a LEFT JOIN item_stock s ON s.activity_id = a.id
		WHERE a.id = $1 GROUP BY a.id`, id).Scan(&a.Open, &a.StartsAt, &a.EndsAt, &items)
	if errors.Is(err, pgx.ErrNoRows) {
		return ActivitySale{}, nil
	}
	if err != nil {
		return ActivitySale{}, fmt.Errorf("reading whether activity %d is on sale: %w", id, err)
	}
	a.Preheated = make(map[int64]bool, len(items))
	for _, it := range items {
		a.Preheated[it] = true
	}
	return a, nil
}

// RecordedFence is the newest fencing token Postgres has seen for lock
// name (lock_fences), 0 if none.
func (s *Store) RecordedFence(ctx context.Context, name string) (int64, error) {
	var token int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(max(token), 0) FROM lock_fences WHERE name = $1`, name).Scan(&token)
	if err != nil {
		return 0, fmt.Errorf("reading the recorded fence of lock %q: %w", name, err)
	}
	return token, nil
}

// RecentItems lists every item of the activities whose sale ends after
// now - endedWithin, preheated or not.
func (s *Store) RecentItems(ctx context.Context, endedWithin time.Duration) ([]SaleItem, error) {
	return s.saleItems(ctx, `a.ends_at > now() - $1::interval`, endedWithin)
}

func (s *Store) saleItems(ctx context.Context, where string, d time.Duration) ([]SaleItem, error) {
	return queryAll[SaleItem](ctx, s.pool, "listing sale items", `SELECT s.activity_id, s.item_id, a.starts_at, a.ends_at, a.per_user_limit, s.buckets
		FROM item_stock s JOIN activities a ON a.id = s.activity_id
		WHERE `+where+` ORDER BY s.activity_id, s.item_id`, d)
}

// Processed is how a request was decided: its processed_requests row.
type Processed struct {
	RequestID string
	Outcome   Outcome // Created or Rejected
	OrderNo   string
}

// ProcessedAmong returns the processed_requests rows of those requestIds that
// have one.
func (s *Store) ProcessedAmong(ctx context.Context, requestIDs []string) (map[string]Processed, error) {
	return processedAmong(ctx, s.pool, requestIDs, false)
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryAll runs sql on q (the pool or a transaction) and collects its rows
// into Ts by column position; what names the query in errors.
func queryAll[T any](ctx context.Context, q querier, what, sql string, args ...any) ([]T, error) {
	return collect(ctx, q, pgx.RowToStructByPos[T], what, sql, args...)
}

// collect is queryAll with the conversion of a row given: by name, for a
// type whose fields the query fills only some of.
func collect[T any](ctx context.Context, q querier, to pgx.RowToFunc[T], what, sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, to)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// backlog counts the pending rows of an outbox, pending (its table and the
// WHERE that picks them), and gives the age of the oldest by created_at
// (database clock; 0 when none). what names the rows in an error.
func (s *Store) backlog(ctx context.Context, pending, what string) (n int64, oldest time.Duration, err error) {
	var secs float64
	err = s.pool.QueryRow(ctx, `SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8
		FROM `+pending).Scan(&n, &secs)
	if err != nil {
		return 0, 0, fmt.Errorf("counting %s: %w", what, err)
	}
	return n, ageOf(secs), nil
}

// ageOf is the age the database gave in seconds as a duration, never
// negative.
func ageOf(secs float64) time.Duration {
	return time.Duration(max(secs, 0) * float64(time.Second))
}

func processedAmong(ctx context.Context, q querier, requestIDs []string, createdOnly bool) (map[string]Processed, error) {
	out := make(map[string]Processed, len(requestIDs))
	if len(requestIDs) == 0 {
		return out, nil
	}
	ps, err := queryAll[Processed](ctx, q, "reading processed requests", `SELECT request_id, outcome, order_no FROM processed_requests
		WHERE request_id = ANY($1) AND (NOT $2 OR outcome = 'CREATED')`, requestIDs, createdOnly)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		out[p.RequestID] = p
	}
	return out, nil
}

// ItemState is what Postgres says about one item while its stock row is
// locked: no order of the item can be created, closed or rejected after
// taking stock until the lock is released, so Stock, Live and the closer's
// compensations cannot move. (A rejection that never took stock can still
// commit; it moves none of them.)
type ItemState struct {
	SaleItem
	Stock int64
	// Pending are the item's compensations not yet marked applied.
	Pending []Compensation
	// Live maps each user holding a live (UNPAID or PAID) order of the item
	// to that order's requestId.
	Live map[int64]string
}

// LockedItem is an ItemState inside the transaction that holds the lock.
type LockedItem struct {
	ItemState
	tx pgx.Tx
}

// CreatedAmong maps those requestIds that were created as orders to their
// orderNo. Under the lock the answer cannot grow for this item's requests.
func (l *LockedItem) CreatedAmong(ctx context.Context, requestIDs []string) (map[string]string, error) {
	ps, err := processedAmong(ctx, l.tx, requestIDs, true)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(ps))
	for id, p := range ps {
		out[id] = p.OrderNo
	}
	return out, nil
}

// Execer is the part of a transaction a fencing check needs.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// LockOptions tune WithItemLocked.
type LockOptions struct {
	// FenceFunc, when set, runs first in the transaction (a lock holder's
	// fencing check); its error aborts.
	FenceFunc func(ctx context.Context, tx Execer) error
	// LockTimeout bounds the wait for the stock row (0: 5s).
	LockTimeout time.Duration
}

// ErrItemNotFound: no such activity item.
var ErrItemNotFound = errors.New("item not found")

// WithItemLocked runs fn while holding the item's stock row FOR UPDATE and
// commits when fn returns nil. Workers and the closer wait for it to commit
// before changing this item, so keep fn short. The activity's row is held
// FOR SHARE too: the window fn is given is the one Postgres holds until fn
// has written it into Redis (see WithSaleWindow; the kill switch waits).
func (s *Store) WithItemLocked(ctx context.Context, activityID, itemID int64, opts LockOptions,
	fn func(ctx context.Context, it *LockedItem) error) error {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = 5 * time.Second
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// Bounds the fence's row lock too: a stale holder still in its
	// transaction must not make us wait forever.
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`,
		fmt.Sprintf("%dms", opts.LockTimeout.Milliseconds())); err != nil {
		return fmt.Errorf("setting lock timeout: %w", err)
	}
	if opts.FenceFunc != nil {
		if err := opts.FenceFunc(ctx, tx); err != nil {
			return err
		}
	}
	it, err := lockItem(ctx, tx, activityID, itemID)
	if err != nil {
		return err
	}
	if err := fn(ctx, it); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

func lockItem(ctx context.Context, tx pgx.Tx, activityID, itemID int64) (*LockedItem, error) {
	it := &LockedItem{tx: tx, ItemState: ItemState{Live: map[int64]string{}}}
	// The activity's row first, as an activity's PUT takes them (the row,
	// then its items): the other order could deadlock with it.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM activities WHERE id = $1 FOR SHARE`, activityID); err != nil {
		return nil, fmt.Errorf("locking activity %d: %w", activityID, err)
	}
	err := tx.QueryRow(ctx, `SELECT s.activity_id, s.item_id, a.starts_at, a.ends_at, a.per_user_limit, s.stock
		FROM item_stock s JOIN activities a ON a.id = s.activity_id
		WHERE s.activity_id = $1 AND s.item_id = $2 FOR UPDATE OF s`, activityID, itemID).
		Scan(&it.ActivityID, &it.ItemID, &it.StartsAt, &it.EndsAt, &it.PerUserLimit, &it.Stock)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("item %d:%d: %w", activityID, itemID, ErrItemNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("locking item %d:%d: %w", activityID, itemID, err)
	}
	if it.Pending, err = queryAll[Compensation](ctx, tx, "reading pending compensations", `
		SELECT id, request_id, order_no, activity_id, item_id, user_id, quantity, reason, COALESCE(limit_owner, '')
		FROM redis_compensations WHERE activity_id = $1 AND item_id = $2 AND applied_at IS NULL ORDER BY id`,
		activityID, itemID); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT user_id, request_id FROM orders
		WHERE activity_id = $1 AND item_id = $2 AND status IN ('UNPAID', 'PAID')`, activityID, itemID)
	if err != nil {
		return nil, fmt.Errorf("reading live orders: %w", err)
	}
	var user int64
	var rid string
	if _, err := pgx.ForEachRow(rows, []any{&user, &rid}, func() error { it.Live[user] = rid; return nil }); err != nil {
		return nil, fmt.Errorf("reading live orders: %w", err)
	}
	return it, nil
}
