package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/order"
	"orderpipe/pkg/relay"
	"orderpipe/pkg/stock"
)

// auditor reads one activity's state in Postgres and Redis.
type auditor struct {
	pool       *pgxpool.Pool
	st         *stock.Store
	activityID int64
	items      []int64
	buckets    int // stock buckets of each item (0 or 1: one)
	// status reads orders.status for I7 (nil: not checked).
	status *statusAudit
}

// statusAudit is where the audit reads orders.status.
type statusAudit struct {
	client *kafka.Client
	topic  string
}

// bucketsOf lists the Redis buckets of an item.
func (a *auditor) bucketsOf(id int64) []stock.Item {
	out := make([]stock.Item, max(a.buckets, 1))
	for b := range out {
		out[b] = stock.Item{ActivityID: a.activityID, ItemID: id, Bucket: b}
	}
	return out
}

// drainState is what is still in flight for the activity.
type drainState struct {
	journal   int64 // reservation journal entries (not yet decided by a worker)
	processed int64 // processed_requests rows
	pending   int64 // compensations not yet applied in Redis
}

func (a *auditor) drainState(ctx context.Context) (drainState, error) {
	var d drainState
	var items []stock.Item
	for _, id := range a.items {
		items = append(items, a.bucketsOf(id)...)
	}
	var err error
	if d.journal, err = a.st.JournalLen(ctx, items...); err != nil {
		return d, err
	}
	err = a.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM processed_requests WHERE activity_id = $1),
		(SELECT count(*) FROM redis_compensations WHERE activity_id = $1 AND applied_at IS NULL)`, a.activityID).
		Scan(&d.processed, &d.pending)
	if err != nil {
		return d, fmt.Errorf("reading processed requests: %w", err)
	}
	return d, nil
}

// waitDrained polls until every journal entry is decided, every accepted
// request has its processed_requests row and no compensation is pending, and
// returns when that was first seen.
func (a *auditor) waitDrained(ctx context.Context, accepted int, since time.Time, within time.Duration,
	scr *scraper, progress io.Writer) (time.Time, error) {
	deadline := time.Now().Add(within)
	lastLine := time.Now()
	for {
		d, err := a.drainState(ctx)
		if err == nil && d.journal == 0 && d.pending == 0 && d.processed >= int64(accepted) {
			return time.Now(), nil
		}
		if time.Since(lastLine) >= time.Second {
			lastLine = time.Now()
			fmt.Fprintf(progress, "bench: draining %3.0fs  journal %d  processed %d/%d  compensations pending %d  lag %s\n",
				time.Since(since).Seconds(), d.journal, d.processed, accepted, d.pending, scr.lagString())
		}
		if time.Now().After(deadline) {
			if err != nil {
				return time.Now(), fmt.Errorf("not drained within %s: %w", within, err)
			}
			return time.Now(), fmt.Errorf("not drained within %s: journal %d, processed %d of %d accepted, compensations pending %d",
				within, d.journal, d.processed, accepted, d.pending)
		}
		select {
		case <-ctx.Done():
			return time.Now(), ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ItemAudit is one item's stock as Postgres and Redis see it after the drain.
type ItemAudit struct {
	ItemID       int64 `json:"itemId"`
	InitialStock int64 `json:"initialStock"`
	DBStock      int64 `json:"dbStock"`
	RedisStock   int64 `json:"redisStock"` // -1: key missing
	LiveOrders   int64 `json:"liveOrders"`
	LiveUnits    int64 `json:"liveUnits"`
	LimitMarkers int64 `json:"limitMarkers"`
	Journal      int64 `json:"journal"`
	// BucketStocks is each bucket's final Redis stock (bucketed items only):
	// units left in one bucket while another is empty were stranded.
	BucketStocks []int64 `json:"bucketStocks,omitempty"`
}

// Audit is what the bench found in Postgres and Redis.
type Audit struct {
	Items []ItemAudit `json:"items"`
	// Orders of the activity by status, and processed_requests by outcome/reason.
	OrdersByStatus  map[string]int64 `json:"ordersByStatus"`
	RejectedInDB    map[string]int64 `json:"rejectedInDb"` // REJECTED processed_requests by reason
	CreatedInDB     int64            `json:"createdInDb"`  // CREATED processed_requests
	PendingCompens  int64            `json:"pendingCompensations"`
	OversoldUnits   int64            `json:"oversoldUnits"`
	DuplicateUsers  int64            `json:"duplicateUsers"`    // (user, item) with more than one live order
	DuplicateReqIDs int64            `json:"duplicateRequests"` // requestIds with more than one order
	Lost            int64            `json:"lost"`              // accepted requests with neither an order nor a REJECTED row
	WrongOrderNo    int64            `json:"wrongOrderNo"`      // accepted requests whose row carries another orderNo
	Unanswered      int64            `json:"unansweredButProcessed"`
	MarkerMismatch  int64            `json:"limitMarkerMismatch"` // markers missing, extra or naming another requestId
	PaidAndClosed   int64            `json:"paidAndClosed"`       // orders that were both paid and closed (I6)
	// StatusChecked says I7 was checked (the audit could reach the
	// broker); StatusProblems are its violations (relay.Audit).
	StatusChecked  bool     `json:"statusChecked"`
	StatusProblems []string `json:"statusProblems,omitempty"`
	LostSample     []string `json:"lostSample,omitempty"`
}

// audit checks the activity against the requests the client saw accepted;
// users are the workload's users by item.
func (a *auditor) audit(ctx context.Context, acc map[string]*acceptance, users map[int64][]int64) (Audit, error) {
	au := Audit{OrdersByStatus: map[string]int64{}, RejectedInDB: map[string]int64{}}
	st := a.st

	// Every row of the activity, by requestId: the activity is the bench's own.
	type row struct {
		orderNo, status, reason string
		userID, itemID          int64
		quantity                int64
	}
	orders := map[string][]row{}
	rows, err := a.pool.Query(ctx, `SELECT request_id, order_no, status, user_id, item_id, quantity
		FROM orders WHERE activity_id = $1`, a.activityID)
	if err != nil {
		return au, fmt.Errorf("reading orders: %w", err)
	}
	for rows.Next() {
		var rid string
		var r row
		if err := rows.Scan(&rid, &r.orderNo, &r.status, &r.userID, &r.itemID, &r.quantity); err != nil {
			rows.Close()
			return au, fmt.Errorf("reading orders: %w", err)
		}
		orders[rid] = append(orders[rid], r)
		au.OrdersByStatus[r.status]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return au, fmt.Errorf("reading orders: %w", err)
	}
	// I6: never both paid and closed (the table refuses it too; the audit
	// does not take that on trust).
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE activity_id = $1
		AND (status = 'PAID' AND closed_at IS NOT NULL OR status = 'CLOSED' AND paid_at IS NOT NULL
		     OR paid_at IS NOT NULL AND closed_at IS NOT NULL)`, a.activityID).Scan(&au.PaidAndClosed); err != nil {
		return au, fmt.Errorf("counting paid and closed orders: %w", err)
	}
	rejected := map[string]row{}
	rows, err = a.pool.Query(ctx, `SELECT request_id, order_no, outcome, COALESCE(reason, '')
		FROM processed_requests WHERE activity_id = $1`, a.activityID)
	if err != nil {
		return au, fmt.Errorf("reading processed requests: %w", err)
	}
	for rows.Next() {
		var rid, outcome string
		var r row
		if err := rows.Scan(&rid, &r.orderNo, &outcome, &r.reason); err != nil {
			rows.Close()
			return au, fmt.Errorf("reading processed requests: %w", err)
		}
		if outcome == "REJECTED" {
			rejected[rid] = r
			au.RejectedInDB[r.reason]++
		} else {
			au.CreatedInDB++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return au, fmt.Errorf("reading processed requests: %w", err)
	}

	// I3 and I4, against what the client was told.
	// A request that timed out at the client may still have been accepted:
	// counted, not an error.
	for rid, rs := range orders {
		if len(rs) > 1 {
			au.DuplicateReqIDs++
		}
		if acc[rid] == nil {
			au.Unanswered++
		}
	}
	for rid := range rejected {
		if acc[rid] == nil {
			au.Unanswered++
		}
	}
	for rid, e := range acc {
		rs, ok := orders[rid]
		rj, rejOK := rejected[rid]
		switch {
		case ok:
			if rs[0].orderNo != e.orderNo {
				au.WrongOrderNo++
			}
		case rejOK:
			if rj.orderNo != e.orderNo {
				au.WrongOrderNo++
			}
		default:
			au.Lost++
			if len(au.LostSample) < 5 {
				au.LostSample = append(au.LostSample, rid)
			}
		}
	}

	// I1, I2 and I5 per item.
	live := map[int64]map[int64][]string{} // item → user → requestIds of live orders
	liveOrders, liveUnits := map[int64]int64{}, map[int64]int64{}
	for rid, rs := range orders {
		for _, r := range rs {
			if r.status != "UNPAID" && r.status != "PAID" {
				continue
			}
			if live[r.itemID] == nil {
				live[r.itemID] = map[int64][]string{}
			}
			live[r.itemID][r.userID] = append(live[r.itemID][r.userID], rid)
			liveOrders[r.itemID]++
			liveUnits[r.itemID] += r.quantity
		}
	}
	for _, id := range a.items {
		it := stock.Item{ActivityID: a.activityID, ItemID: id}
		ia := ItemAudit{ItemID: id, RedisStock: -1}
		err := a.pool.QueryRow(ctx, `SELECT initial_stock, stock FROM item_stock WHERE activity_id = $1 AND item_id = $2`,
			a.activityID, id).Scan(&ia.InitialStock, &ia.DBStock)
		if err != nil {
			return au, fmt.Errorf("reading stock of item %d: %w", id, err)
		}
		ia.LiveOrders, ia.LiveUnits = liveOrders[id], liveUnits[id]
		au.OversoldUnits += max(0, ia.LiveUnits-ia.InitialStock)
		for _, rids := range live[id] {
			if len(rids) > 1 {
				au.DuplicateUsers++
			}
		}
		if err := a.redisState(ctx, st, it, &ia, &au); err != nil {
			return au, err
		}
		markers, err := a.markersOf(ctx, st, id, users[id])
		if err != nil {
			return au, err
		}
		ia.LimitMarkers = int64(len(markers))
		for user, rids := range live[id] {
			if markers[user] != rids[0] {
				au.MarkerMismatch++
			}
		}
		for user := range markers {
			if _, ok := live[id][user]; !ok {
				au.MarkerMismatch++
			}
		}
		au.Items = append(au.Items, ia)
	}
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM redis_compensations WHERE activity_id = $1 AND applied_at IS NULL`,
		a.activityID).Scan(&au.PendingCompens); err != nil {
		return au, fmt.Errorf("reading compensations: %w", err)
	}
	a.auditStatus(ctx, &au)
	return au, nil
}

// auditStatus checks I7 on the activity: once the relay has drained the
// outbox, every state of its orders is on orders.status in version order,
// and nothing else (relay.Audit, the checker the tests use).
func (a *auditor) auditStatus(ctx context.Context, au *Audit) {
	if a.status == nil {
		return
	}
	au.StatusChecked = true
	orders := order.NewStore(a.pool)
	if err := relay.WaitPublished(ctx, orders, 30*time.Second); err != nil {
		au.StatusProblems = append(au.StatusProblems, err.Error())
		return
	}
	problems, err := relay.Audit(ctx, orders, a.status.client, a.status.topic, a.activityID)
	if err != nil {
		problems = append(problems, "reading orders.status: "+err.Error())
	}
	au.StatusProblems = append(au.StatusProblems, problems...)
}

// markersOf reads the limit markers of the given users on one item, each in
// the user's bucket.
func (a *auditor) markersOf(ctx context.Context, st *stock.Store, id int64, users []int64) (map[int64]string, error) {
	if a.buckets <= 1 {
		return st.MarkerOwners(ctx, stock.Item{ActivityID: a.activityID, ItemID: id}, users)
	}
	per := make([][]int64, a.buckets)
	for _, u := range users {
		b := stock.BucketOf(u, a.buckets)
		per[b] = append(per[b], u)
	}
	out := map[int64]string{}
	for b, it := range a.bucketsOf(id) {
		m, err := st.MarkerOwners(ctx, it, per[b])
		if err != nil {
			return nil, err
		}
		for u, rid := range m {
			out[u] = rid
		}
	}
	return out, nil
}

// redisState fills an item's Redis stock and journal entries; for a
// bucketed item the stock (Σ over its buckets, plus
// the units a mover has taken and not yet given) and journal entries; a
// bucket below zero is oversold.
func (a *auditor) redisState(ctx context.Context, st *stock.Store, base stock.Item, ia *ItemAudit, au *Audit) error {
	id := base.ItemID
	if a.buckets <= 1 {
		stocks, err := st.BucketStocks(ctx, base, 1)
		if err != nil {
			return fmt.Errorf("reading redis stock of item %d: %w", id, err)
		}
		if n := stocks[0]; n != nil {
			ia.RedisStock = *n
			au.OversoldUnits += max(0, -*n)
		}
		if ia.Journal, err = st.JournalLen(ctx, base); err != nil {
			return fmt.Errorf("reading journal of item %d: %w", id, err)
		}
		return nil
	}
	stocks, err := st.BucketStocks(ctx, base, a.buckets)
	if err != nil {
		return err
	}
	var total int64
	for _, n := range stocks {
		if n == nil {
			return nil // RedisStock stays -1: missing
		}
		ia.BucketStocks = append(ia.BucketStocks, *n)
		total += *n
		au.OversoldUnits += max(0, -*n)
	}
	transfers, err := st.Transfers(ctx, base, a.buckets)
	if err != nil {
		return err
	}
	for _, t := range transfers {
		if !t.Given {
			total += t.Units
		}
	}
	ia.RedisStock = total
	if ia.Journal, err = st.JournalLen(ctx, a.bucketsOf(id)...); err != nil {
		return fmt.Errorf("reading journal of item %d: %w", id, err)
	}
	return nil
}
