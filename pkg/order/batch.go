package order

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Request is one reservation to persist, as the worker decoded it.
type Request struct {
	RequestID  string
	OrderNo    string
	UserID     int64
	ActivityID int64
	ItemID     int64
	Quantity   int
	ReservedAt time.Time
	// PayBy is the payment deadline its UNPAID event shows (ReservedAt +
	// CLOSE_AFTER, which the worker knows; the closer closes by reserved_at
	// older than CLOSE_AFTER, the same instant); zero ⇒ none.
	PayBy time.Time
	// Bucket is the Redis stock bucket the reservation was taken from (the
	// event's); Postgres does not store it (it is FNV-1a(userId) mod the
	// item's buckets).
	Bucket int
	// Held says the worker claimed the reservation in Redis: its stock is
	// counted there, so a rejection must give it back (a compensation).
	// Without it (Redis lost the entry) a rejection compensates nothing.
	Held bool
	// TraceParent is the W3C trace context of the message that carried the
	// reservation: the order's orders.status events continue that trace.
	TraceParent string
}

// Outcome of one request in a batch.
type Outcome string

const (
	Created  Outcome = "CREATED"
	Rejected Outcome = "REJECTED"
	// Duplicate: the request was already processed; Prior tells how.
	Duplicate Outcome = "DUPLICATE"
	// Foreign: the requestId was processed for another reservation (the
	// client reused it for another item); this reservation is given back.
	Foreign Outcome = "FOREIGN"
)

// Decision is what the batch did with one request.
type Decision struct {
	Request
	Outcome Outcome
	Reason  string  // Rejected and Foreign
	Prior   Outcome // Duplicate: the first outcome (Created or Rejected)
	// Compensation written in this transaction, if any.
	Compensation *Compensation
	limitOwner   string
}

// Compensation is an outbox row: a Redis rollback to apply.
type Compensation struct {
	ID         int64
	RequestID  string
	OrderNo    string
	ActivityID int64
	ItemID     int64
	UserID     int64
	Quantity   int
	Reason     string
	LimitOwner string
}

type itemKey struct{ activityID, itemID int64 }

// DecideBatch persists a batch of reservations in one transaction and
// returns a decision per request, in order. Its effect is that of the
// contract's per-message steps applied in batch order — idempotency row,
// conditional stock update, order insert, compensation when Postgres says no —
// but a hot item costs one conditional UPDATE per batch: the orders are
// inserted in bulk (the live-order index refuses second orders), and the
// item's stock is taken for all of them at once; only if that UPDATE finds
// too little stock does the batch fall back to deciding order by order.
// Nothing is visible unless the whole batch commits, so the caller commits
// Kafka offsets only after it returns nil.
func (s *Store) DecideBatch(ctx context.Context, reqs []Request) ([]Decision, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("beginning batch tx: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	out, err := decideBatch(ctx, tx, reqs)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("committing batch: %w", err)
	}
	return out, nil
}

func decideBatch(ctx context.Context, tx pgx.Tx, reqs []Request) ([]Decision, error) {
	out := make([]Decision, len(reqs))
	for i, r := range reqs {
		out[i] = Decision{Request: r}
	}
	fresh, err := recordRequests(ctx, tx, out)
	if err != nil {
		return nil, err
	}
	// Per item, in a fixed order so concurrent workers never deadlock.
	byItem := map[itemKey][]int{}
	var items []itemKey
	for _, i := range fresh {
		k := itemKey{out[i].ActivityID, out[i].ItemID}
		if byItem[k] == nil {
			items = append(items, k)
		}
		byItem[k] = append(byItem[k], i)
	}
	slices.SortFunc(items, func(a, b itemKey) int {
		if a.activityID != b.activityID {
			return int(a.activityID - b.activityID)
		}
		return int(a.itemID - b.itemID)
	})
	for _, k := range items {
		if err := decideItem(ctx, tx, k, out, byItem[k]); err != nil {
			return nil, fmt.Errorf("deciding item %d:%d: %w", k.activityID, k.itemID, err)
		}
	}
	if err := recordRejections(ctx, tx, out); err != nil {
		return nil, err
	}
	if err := writeEvents(ctx, tx, batchEvents(out)); err != nil {
		return nil, err
	}
	return out, nil
}

// batchEvents are the orders.status events of a batch's decisions: UNPAID
// for each order created, REJECTED with its reason for each request or
// reservation refused; a duplicate changes nothing, so it has none.
func batchEvents(out []Decision) []statusChange {
	var evs []statusChange
	for _, d := range out {
		var st string
		switch d.Outcome {
		case Created:
			st = StatusUnpaid
		case Rejected, Foreign:
			st = StatusRejected
		default:
			continue
		}
		c := statusChange{OrderNo: d.OrderNo, RequestID: d.RequestID, UserID: d.UserID, ActivityID: d.ActivityID,
			ItemID: d.ItemID, Quantity: d.Quantity, Status: st, Reason: d.Reason, Version: 1, TraceParent: d.TraceParent}
		if st == StatusUnpaid {
			c.PayBy = d.PayBy
		}
		evs = append(evs, c)
	}
	return evs
}

// recordRequests inserts the idempotency rows and returns the indexes of the
// requests seen for the first time; the others become Duplicate (same
// reservation) or Foreign (the requestId names another reservation).
func recordRequests(ctx context.Context, tx pgx.Tx, out []Decision) ([]int, error) {
	n := len(out)
	ids, nos := make([]string, 0, n), make([]string, 0, n)
	users, acts, items, qs := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int32, 0, n)
	ats := make([]time.Time, 0, n)
	first := map[string]int{} // requestId → index of its first occurrence in the batch
	for i, d := range out {
		if _, seen := first[d.RequestID]; seen {
			continue
		}
		first[d.RequestID] = i
		ids, nos = append(ids, d.RequestID), append(nos, d.OrderNo)
		users, acts, items = append(users, d.UserID), append(acts, d.ActivityID), append(items, d.ItemID)
		qs, ats = append(qs, int32(d.Quantity)), append(ats, d.ReservedAt)
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO processed_requests (request_id, outcome, order_no, user_id, activity_id, item_id, quantity, reserved_at)
		SELECT r, 'CREATED', o, u, a, i, q, t
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::int[], $7::timestamptz[]) AS x(r, o, u, a, i, q, t)
		ON CONFLICT (request_id) DO NOTHING
		RETURNING request_id`, ids, nos, users, acts, items, qs, ats)
	if err != nil {
		return nil, fmt.Errorf("recording requests: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("recording requests: %w", err)
	}
	isNew := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		isNew[id] = true
	}
	var fresh []int
	var known []string
	for i, d := range out {
		switch {
		case first[d.RequestID] == i && isNew[d.RequestID]:
			fresh = append(fresh, i)
		case first[d.RequestID] != i:
			// A second copy in this batch: decided with its first copy, below.
		default:
			known = append(known, d.RequestID)
		}
	}
	prior := map[string][2]string{} // requestId → outcome, order_no
	if len(known) > 0 {
		rows, err := tx.Query(ctx, `SELECT request_id, outcome, order_no FROM processed_requests WHERE request_id = ANY($1)`, known)
		if err != nil {
			return nil, fmt.Errorf("reading processed requests: %w", err)
		}
		var id, outcome, orderNo string
		_, err = pgx.ForEachRow(rows, []any{&id, &outcome, &orderNo}, func() error {
			prior[id] = [2]string{outcome, orderNo}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading processed requests: %w", err)
		}
	}
	for i := range out {
		d := &out[i]
		if first[d.RequestID] != i || isNew[d.RequestID] {
			continue
		}
		p := prior[d.RequestID]
		if p[1] == d.OrderNo {
			d.Outcome, d.Prior = Duplicate, Outcome(p[0])
		} else {
			d.Outcome, d.Reason = Foreign, ReasonKeyReused
		}
	}
	return fresh, nil
}

// decideItem creates the orders of one item: bulk insert, then one
// conditional stock update for all of them; per-order decisions only when
// the stock does not cover the whole batch.
func decideItem(ctx context.Context, tx pgx.Tx, k itemKey, out []Decision, idx []int) error {
	n := len(idx)
	nos, ids := make([]string, n), make([]string, n)
	users, qs, ats := make([]int64, n), make([]int32, n), make([]time.Time, n)
	for j, i := range idx {
		d := out[i]
		nos[j], ids[j], users[j], qs[j], ats[j] = d.OrderNo, d.RequestID, d.UserID, int32(d.Quantity), d.ReservedAt
	}
	// WITH ORDINALITY keeps batch order, so of two orders of one user in a
	// batch the first wins, as it would one by one.
	rows, err := tx.Query(ctx, `
		INSERT INTO orders (order_no, request_id, user_id, activity_id, item_id, quantity, status, reserved_at)
		SELECT o, r, u, $6, $7, q, 'UNPAID', t
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[], $5::timestamptz[]) WITH ORDINALITY AS x(o, r, u, q, t, n)
		ORDER BY n
		ON CONFLICT DO NOTHING
		RETURNING order_no`, nos, ids, users, qs, ats, k.activityID, k.itemID)
	if err != nil {
		return fmt.Errorf("inserting orders: %w", err)
	}
	insertedNos, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("inserting orders: %w", err)
	}
	inserted := make(map[string]bool, len(insertedNos))
	for _, no := range insertedNos {
		inserted[no] = true
	}
	var created []int
	var total int64
	var dupUsers []int64
	for _, i := range idx {
		if inserted[out[i].OrderNo] {
			created = append(created, i)
			total += int64(out[i].Quantity)
			continue
		}
		// The one-live-order index refused it.
		out[i].Outcome, out[i].Reason = Rejected, ReasonDuplicateLiveOrder
		dupUsers = append(dupUsers, out[i].UserID)
	}
	if len(dupUsers) > 0 {
		if err := setLimitOwners(ctx, tx, k, out, idx, dupUsers); err != nil {
			return err
		}
	}
	if len(created) == 0 {
		return nil
	}
	var after int64
	err = tx.QueryRow(ctx, `UPDATE item_stock SET stock = stock - $3, version = version + 1, updated_at = now()
		WHERE activity_id = $1 AND item_id = $2 AND stock >= $3 RETURNING stock`, k.activityID, k.itemID, total).Scan(&after)
	if errors.Is(err, pgx.ErrNoRows) {
		return decideOneByOne(ctx, tx, k, out, idx, created)
	}
	if err != nil {
		return fmt.Errorf("taking stock: %w", err)
	}
	for _, i := range created {
		out[i].Outcome = Created
	}
	// One by one, a refused second order is checked for stock before the
	// live-order index: one that would not have fit is a stock mismatch.
	if len(dupUsers) > 0 {
		var taken int64
		for _, i := range idx {
			d := &out[i]
			switch {
			case d.Outcome == Created:
				taken += int64(d.Quantity)
			case int64(d.Quantity) > after+total-taken:
				d.Reason = ReasonDBStockMismatch // the user's marker still goes to their live order
			}
		}
	}
	return nil
}

// decideOneByOne is the fallback when the item's stock does not cover the
// whole batch. The bulk insert's verdicts are undone and every request of
// the item is decided again as the contract's per-message steps would, in
// batch order: too little stock left ⇒ DB_STOCK_MISMATCH (before the
// live-order check, so a request that does not fit never blocks a later one
// of the same user that does), else the order insert, which the live-order
// index may refuse (DUPLICATE_LIVE_ORDER).
func decideOneByOne(ctx context.Context, tx pgx.Tx, k itemKey, out []Decision, idx []int, created []int) error {
	nos := make([]string, len(created))
	for j, i := range created {
		nos[j] = out[i].OrderNo
	}
	if _, err := tx.Exec(ctx, `DELETE FROM orders WHERE order_no = ANY($1)`, nos); err != nil {
		return fmt.Errorf("undoing the bulk insert: %w", err)
	}
	var left int64
	err := tx.QueryRow(ctx, `SELECT stock FROM item_stock WHERE activity_id = $1 AND item_id = $2 FOR UPDATE`, k.activityID, k.itemID).Scan(&left)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("reading stock: %w", err)
	}
	var taken int64
	var rejUsers []int64
	for _, i := range idx {
		d := &out[i]
		d.Outcome, d.Reason, d.limitOwner = "", "", ""
		q := int64(d.Quantity)
		if q > left-taken {
			d.Outcome, d.Reason = Rejected, ReasonDBStockMismatch
			rejUsers = append(rejUsers, d.UserID)
			continue
		}
		tag, err := tx.Exec(ctx, `INSERT INTO orders (order_no, request_id, user_id, activity_id, item_id, quantity, status, reserved_at)
			VALUES ($1, $2, $3, $4, $5, $6, 'UNPAID', $7) ON CONFLICT DO NOTHING`,
			d.OrderNo, d.RequestID, d.UserID, k.activityID, k.itemID, d.Quantity, d.ReservedAt)
		if err != nil {
			return fmt.Errorf("inserting order: %w", err)
		}
		if tag.RowsAffected() == 0 {
			d.Outcome, d.Reason = Rejected, ReasonDuplicateLiveOrder
			rejUsers = append(rejUsers, d.UserID)
			continue
		}
		d.Outcome = Created
		taken += q
	}
	// A rejected request's user may hold a live order all the same (an
	// earlier one, or a later one of this batch): their marker goes to it.
	if len(rejUsers) > 0 {
		if err := setLimitOwners(ctx, tx, k, out, idx, rejUsers); err != nil {
			return err
		}
	}
	if taken == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE item_stock SET stock = stock - $3, version = version + 1, updated_at = now()
		WHERE activity_id = $1 AND item_id = $2`, k.activityID, k.itemID, taken); err != nil {
		return fmt.Errorf("taking stock: %w", err)
	}
	return nil
}

// setLimitOwners finds, for users of rejected requests, the request of the
// live order they hold, if any, so their Redis marker is handed to it rather
// than freed.
func setLimitOwners(ctx context.Context, tx pgx.Tx, k itemKey, out []Decision, idx []int, users []int64) error {
	rows, err := tx.Query(ctx, `SELECT user_id, request_id FROM orders
		WHERE activity_id = $1 AND item_id = $2 AND user_id = ANY($3) AND status IN ('UNPAID', 'PAID')`, k.activityID, k.itemID, users)
	if err != nil {
		return fmt.Errorf("reading live orders: %w", err)
	}
	owner := map[int64]string{}
	var user int64
	var rid string
	if _, err := pgx.ForEachRow(rows, []any{&user, &rid}, func() error { owner[user] = rid; return nil }); err != nil {
		return fmt.Errorf("reading live orders: %w", err)
	}
	for _, i := range idx {
		if out[i].Outcome == Rejected {
			out[i].limitOwner = owner[out[i].UserID]
		}
	}
	return nil
}

// recordRejections marks rejected requests and writes the compensations of
// held reservations (Rejected and Foreign), and settles second copies.
func recordRejections(ctx context.Context, tx pgx.Tx, out []Decision) error {
	r := sortRejections(out)
	if err := recordForeign(ctx, tx, out, r.foreign); err != nil {
		return err
	}
	if len(r.ids) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE processed_requests p SET outcome = 'REJECTED', reason = x.reason
			FROM unnest($1::text[], $2::text[]) AS x(id, reason) WHERE p.request_id = x.id`, r.ids, r.reasons); err != nil {
			return fmt.Errorf("recording rejections: %w", err)
		}
	}
	return writeCompensations(ctx, tx, out, r.comps)
}

// rejections is what recordRejections writes: the rejected requests with
// their reasons, and indexes into the batch's decisions.
type rejections struct {
	ids, reasons []string
	comps        []int // held reservations to give back
	foreign      []int // refused: their requestId is another reservation's
}

// sortRejections sorts the batch's refusals. A second copy of a request in
// the batch is settled here: the same reservation is a Duplicate of the
// first; another reservation under that requestId is Foreign.
func sortRejections(out []Decision) rejections {
	var r rejections
	first := map[string]int{}
	for i := range out {
		d := &out[i]
		j, seen := first[d.RequestID]
		switch {
		case seen && out[j].OrderNo == d.OrderNo:
			d.Outcome = Duplicate
			d.Prior = out[j].Outcome
			if d.Prior == Duplicate {
				d.Prior = out[j].Prior
			}
			continue
		case seen:
			d.Outcome, d.Reason = Foreign, ReasonKeyReused
		default:
			first[d.RequestID] = i
		}
		switch d.Outcome {
		case Rejected:
			r.ids, r.reasons = append(r.ids, d.RequestID), append(r.reasons, d.Reason)
		case Foreign:
			r.foreign = append(r.foreign, i)
		default:
			continue
		}
		if d.Held {
			r.comps = append(r.comps, i)
		}
	}
	return r
}

// writeCompensations writes one compensation per held reservation at idx
// and hangs each written one on its decision (an orderNo compensated
// before writes none).
func writeCompensations(ctx context.Context, tx pgx.Tx, out []Decision, idx []int) error {
	if len(idx) == 0 {
		return nil
	}
	n := len(idx)
	ids, nos, reasons, owners := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	acts, items, users, qs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int32, n)
	for j, i := range idx {
		d := out[i]
		ids[j], nos[j], reasons[j], owners[j] = d.RequestID, d.OrderNo, d.Reason, d.limitOwner
		acts[j], items[j], users[j], qs[j] = d.ActivityID, d.ItemID, d.UserID, int32(d.Quantity)
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO redis_compensations (request_id, order_no, activity_id, item_id, user_id, quantity, reason, limit_owner)
		SELECT r, o, a, i, u, q, why, NULLIF(own, '')
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::int[], $7::text[], $8::text[])
			AS x(r, o, a, i, u, q, why, own)
		ON CONFLICT (order_no) DO NOTHING
		RETURNING id, order_no`, ids, nos, acts, items, users, qs, reasons, owners)
	if err != nil {
		return fmt.Errorf("writing compensations: %w", err)
	}
	written := map[string]int64{}
	var id int64
	var no string
	if _, err := pgx.ForEachRow(rows, []any{&id, &no}, func() error { written[no] = id; return nil }); err != nil {
		return fmt.Errorf("writing compensations: %w", err)
	}
	for _, i := range idx {
		d := &out[i]
		if id, ok := written[d.OrderNo]; ok {
			d.Compensation = &Compensation{ID: id, RequestID: d.RequestID, OrderNo: d.OrderNo, ActivityID: d.ActivityID, ItemID: d.ItemID,
				UserID: d.UserID, Quantity: d.Quantity, Reason: d.Reason, LimitOwner: d.limitOwner}
		}
	}
	return nil
}

// recordForeign keeps the reservations refused because their requestId
// belongs to another one as REJECTED records GET can return: their orderNo
// was shown in a 202 (I3, I4).
func recordForeign(ctx context.Context, tx pgx.Tx, out []Decision, idx []int) error {
	if len(idx) == 0 {
		return nil
	}
	n := len(idx)
	nos, ids, reasons := make([]string, n), make([]string, n), make([]string, n)
	users, acts, items, qs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int32, n)
	ats := make([]time.Time, n)
	for j, i := range idx {
		d := out[i]
		nos[j], ids[j], reasons[j] = d.OrderNo, d.RequestID, d.Reason
		users[j], acts[j], items[j], qs[j], ats[j] = d.UserID, d.ActivityID, d.ItemID, int32(d.Quantity), d.ReservedAt
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO rejected_reservations (order_no, request_id, user_id, activity_id, item_id, quantity, reason, reserved_at)
		SELECT o, r, u, a, i, q, why, t
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::int[], $7::text[], $8::timestamptz[])
			AS x(o, r, u, a, i, q, why, t)
		ON CONFLICT (order_no) DO NOTHING`, nos, ids, users, acts, items, qs, reasons, ats); err != nil {
		return fmt.Errorf("recording refused reservations: %w", err)
	}
	return nil
}

// PendingCompensations lists unapplied compensations created before
// now - olderThan (by the database clock), oldest first.
func (s *Store) PendingCompensations(ctx context.Context, olderThan time.Duration, limit int) ([]Compensation, error) {
	return queryAll[Compensation](ctx, s.pool, "listing pending compensations", `
		SELECT id, request_id, order_no, activity_id, item_id, user_id, quantity, reason, COALESCE(limit_owner, '')
		FROM redis_compensations
		WHERE applied_at IS NULL AND created_at < now() - $1::interval
		ORDER BY id LIMIT $2`, olderThan, limit)
}

// CountPendingCompensations counts unapplied compensations.
func (s *Store) CountPendingCompensations(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM redis_compensations WHERE applied_at IS NULL`).Scan(&n)
	return n, err
}

// CompensationBacklog counts the compensations not yet applied in Redis
// and gives the age of the oldest (database clock; 0 when none is pending):
// one waiting long means Redis has refused its release for that long.
func (s *Store) CompensationBacklog(ctx context.Context) (n int64, oldest time.Duration, err error) {
	return s.backlog(ctx, "redis_compensations WHERE applied_at IS NULL", "pending compensations")
}

// markAppliedSQL marks a pending compensation applied, found by its key
// alone (IS TRUE: see the package doc).
const markAppliedSQL = `UPDATE redis_compensations SET applied_at = now(), attempts = attempts + 1, last_error = NULL
		WHERE id = $1 AND (applied_at IS NULL) IS TRUE`

// MarkCompensationApplied records that Redis has the rollback.
func (s *Store) MarkCompensationApplied(ctx context.Context, id int64) error {
	_, err := s.pool.Exec(ctx, markAppliedSQL, id)
	if err != nil {
		return fmt.Errorf("marking compensation %d applied: %w", id, err)
	}
	return nil
}

// MarkCompensationFailed records a failed attempt.
func (s *Store) MarkCompensationFailed(ctx context.Context, id int64, cause error) error {
	_, err := s.pool.Exec(ctx, `UPDATE redis_compensations SET attempts = attempts + 1, last_error = $2 WHERE id = $1`, id, cause.Error())
	if err != nil {
		return fmt.Errorf("marking compensation %d failed: %w", id, err)
	}
	return nil
}
