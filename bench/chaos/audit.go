package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/stock/stocktest"
)

// audit holds one drained activity to the invariants (docs/architecture.md) and to
// what its clients were told.
type audit struct {
	orders       int // rows in orders for the activity
	rejected     int // REJECTED processed_requests
	lost         int // I4: a 202's orderNo that is neither an order nor a REJECTED request
	duplicates   int // I2/I3: requestIds with two orders, users with two live orders of an item, replays answered with another orderNo
	dbDuplicates int // of those, in Postgres (the unique indexes make them impossible)
	// refusedReplays: replays of accepted requests refused (I3: a replay
	// returns the first answer).
	refusedReplays int
	oversold       int64
	closed         int
	paidDB         int
	lostOrderNos   []string
	problems       []string
	kinds          map[string]int
}

// problem records a broken invariant; past five of a kind (the text up to
// the first colon) they are only counted, and finish says how many.
func (a *audit) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	kind, _, _ := strings.Cut(msg, ":")
	if a.kinds == nil {
		a.kinds = map[string]int{}
	}
	if a.kinds[kind]++; a.kinds[kind] <= 5 {
		a.problems = append(a.problems, msg)
	}
}

func (a *audit) finish() {
	var kinds []string
	for k := range a.kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		if n := a.kinds[k]; n > 5 {
			a.problems = append(a.problems, fmt.Sprintf("%s: … %d more like these (%d in all)", k, n-5, n))
		}
	}
}

type orderRow struct {
	requestID, status string
	userID, itemID    int64
	quantity          int64
	paid, closed      bool
}

type processedRow struct {
	outcome, orderNo, reason string
}

// runAudit checks the activity once nothing is in flight (and nothing
// moves: Postgres is read in one snapshot all the same).
func runAudit(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client, st *stock.Store, act int64, items []int64, users int, res *loadResult) (*audit, error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	a := &audit{}
	orders := map[string]orderRow{} // by orderNo
	byRequest := map[string][]string{}
	rows, err := tx.Query(ctx, `SELECT order_no, request_id, user_id, item_id, quantity, status,
		paid_at IS NOT NULL, closed_at IS NOT NULL FROM orders WHERE activity_id = $1`, act)
	if err != nil {
		return nil, fmt.Errorf("reading orders: %w", err)
	}
	for rows.Next() {
		var no string
		var o orderRow
		if err := rows.Scan(&no, &o.requestID, &o.userID, &o.itemID, &o.quantity, &o.status, &o.paid, &o.closed); err != nil {
			rows.Close()
			return nil, err
		}
		orders[no] = o
		byRequest[o.requestID] = append(byRequest[o.requestID], no)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	a.orders = len(orders)

	processed, err := processedRequests(ctx, tx, act)
	if err != nil {
		return nil, err
	}
	for _, p := range processed {
		if p.outcome == "REJECTED" {
			a.rejected++
		}
	}

	// Reservations refused because their requestId was first used for
	// another item: REJECTED records of their own (orderNo → requestId).
	refused, err := refusedReservations(ctx, tx, act)
	if err != nil {
		return nil, err
	}

	res.mu.Lock()
	defer res.mu.Unlock()

	// I4 and I3 against what the clients were told: every orderNo a 202
	// (or a replay) carried is an order or a rejected request.
	var lost []string
	for _, rid := range res.accepted {
		r := res.requests[rid]
		p := processed[rid]
		for _, no := range append([]string{r.orderNo}, r.mismatched...) {
			o, isOrder := orders[no]
			switch {
			case isOrder && o.requestID == rid:
			case p.outcome == "REJECTED" && p.orderNo == no:
			case refused[no] == rid:
			default:
				lost = append(lost, fmt.Sprintf("%s→%s (processed: %q %q %q)", rid, no, p.outcome, p.orderNo, p.reason))
				a.lostOrderNos = append(a.lostOrderNos, no)
			}
		}
		if nos := byRequest[rid]; len(nos) == 1 && nos[0] != r.orderNo {
			a.duplicates++
			a.problem("I3: request %s was answered %s but its order is %s", rid, r.orderNo, nos[0])
		}
		if len(r.mismatched) > 0 {
			a.duplicates += len(r.mismatched)
			a.problem("I3: replay of %s (first answer %s) answered %v", rid, r.orderNo, r.mismatched)
		}
		if len(r.refused) > 0 {
			a.refusedReplays += len(r.refused)
			a.problem("I3: replay of %s (first answer %s) answered %v", rid, r.orderNo, r.refused)
		}
	}
	a.lost = len(lost)
	sort.Strings(lost)
	for _, l := range lost {
		a.problem("I4: lost %s", l)
	}
	for rid, nos := range byRequest {
		if len(nos) > 1 {
			a.duplicates++
			a.dbDuplicates++
			a.problem("I3: request %s has %d orders", rid, len(nos))
		}
		if _, sent := res.requests[rid]; !sent {
			a.problem("phantom order %v for request %s that no client sent", nos, rid)
		}
	}

	// I2 and I6.
	live := map[[2]int64]int{}
	liveRequest := map[[2]int64]string{} // (item, user) → requestId of the live order
	liveQty := map[int64]int64{}
	for no, o := range orders {
		switch o.status {
		case "UNPAID", "PAID":
			live[[2]int64{o.itemID, o.userID}]++
			liveRequest[[2]int64{o.itemID, o.userID}] = o.requestID
			liveQty[o.itemID] += o.quantity
		case "CLOSED":
			a.closed++
		}
		if o.status == "PAID" {
			a.paidDB++
		}
		if (o.status == "PAID" && o.closed) || (o.status == "CLOSED" && o.paid) || (o.paid && o.closed) {
			a.problem("I6: order %s is %s with paid=%v closed=%v", no, o.status, o.paid, o.closed)
		}
	}
	for k, n := range live {
		if n > 1 {
			a.duplicates++
			a.dbDuplicates++
			a.problem("I2: user %d holds %d live orders of item %d", k[1], n, k[0])
		}
	}
	for no, p := range res.pays {
		o, ok := orders[no]
		switch {
		case p.status == http.StatusOK && (!ok || o.status != "PAID"):
			a.problem("I6: order %s was answered PAID but is %q", no, o.status)
		case p.code == "ORDER_CLOSED" && (!ok || o.status != "CLOSED"):
			a.problem("I6: order %s was answered ORDER_CLOSED but is %q", no, o.status)
		}
	}

	// I1 and (nothing in flight) I5.
	for _, it := range items {
		var initial, dbStock int64
		var buckets int
		if err := tx.QueryRow(ctx, `SELECT initial_stock, stock, buckets FROM item_stock WHERE activity_id = $1 AND item_id = $2`,
			act, it).Scan(&initial, &dbStock, &buckets); err != nil {
			return nil, fmt.Errorf("reading item %d: %w", it, err)
		}
		if over := liveQty[it] - initial; over > 0 {
			a.oversold += over
		}
		if dbStock < 0 || initial != dbStock+liveQty[it] {
			a.problem("I1: item %d: initial %d != stock %d + live %d", it, initial, dbStock, liveQty[it])
		}
		redisStock, err := redisStockOf(ctx, st, stock.Item{ActivityID: act, ItemID: it}, buckets)
		if err != nil {
			a.problem("I5: item %d: redis stock: %v", it, err)
		} else if redisStock != dbStock {
			a.problem("I5: item %d: redis stock %d != db stock %d", it, redisStock, dbStock)
		}
		if n, err := journalLen(ctx, st, stock.Item{ActivityID: act, ItemID: it}, buckets); err != nil || n != 0 {
			a.problem("I5: item %d: %d journal entries left (%v)", it, n, err)
		}
		// The users are known: read every one's marker (no SCAN of a shared
		// Redis) and hold it to their live order.
		pipe := rdb.Pipeline()
		cmds := make([]*redis.StringCmd, users+1)
		for u := 1; u <= users; u++ {
			cmds[u] = pipe.Get(ctx, stocktest.KeysOf(st, stock.Item{ActivityID: act, ItemID: it}.ForUser(int64(u), buckets)).Limit(int64(u)))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("reading limit markers: %w", err)
		}
		for u := 1; u <= users; u++ {
			marker, want := cmds[u].Val(), liveRequest[[2]int64{it, int64(u)}]
			if marker != want {
				a.problem("I5: item %d user %d: limit marker %q, live order's request %q", it, u, marker, want)
			}
		}
	}
	a.finish()
	return a, nil
}

func stockItem(act, item int64) stock.Item { return stock.Item{ActivityID: act, ItemID: item} }

// refusedReservations is, of activity act, the reservations refused because
// their requestId was first used for another item (orderNo → requestId):
// REJECTED records of their own. A schema from before that table (an older
// binary run with CHAOS_BIN) has none.
func refusedReservations(ctx context.Context, q pgx.Tx, act int64) (map[string]string, error) {
	refused := map[string]string{}
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('rejected_reservations') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return refused, err
	}
	rows, err := q.Query(ctx, `SELECT order_no, request_id FROM rejected_reservations WHERE activity_id = $1`, act)
	if err != nil {
		return nil, fmt.Errorf("reading refused reservations: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var no, rid string
		if err := rows.Scan(&no, &rid); err != nil {
			return nil, err
		}
		refused[no] = rid
	}
	return refused, rows.Err()
}

// processedRequests is the activity's processed_requests rows by requestId.
func processedRequests(ctx context.Context, tx pgx.Tx, act int64) (map[string]processedRow, error) {
	processed := map[string]processedRow{}
	rows, err := tx.Query(ctx, `SELECT request_id, outcome, order_no, COALESCE(reason, '') FROM processed_requests WHERE activity_id = $1`, act)
	if err != nil {
		return nil, fmt.Errorf("reading processed requests: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rid string
		var p processedRow
		if err := rows.Scan(&rid, &p.outcome, &p.orderNo, &p.reason); err != nil {
			return nil, err
		}
		processed[rid] = p
	}
	return processed, rows.Err()
}
