package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"orderpipe/pkg/invariant"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// auditor reads one activity's state in Postgres and Redis.
type auditor struct {
	orders     *order.Store
	st         *stock.Store
	activityID int64
	items      []int64
	buckets    int // stock buckets of each item (0 or 1: one)
	// status reads orders.status for I7 (nil: not checked).
	status *invariant.StatusTopic
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
	dr, err := a.orders.DrainOf(ctx, a.activityID)
	d.processed, d.pending = dr.Decided, dr.PendingCompensations
	return d, err
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

// Audit is what the bench found in Postgres and Redis: the figures, and
// the invariant checker's verdict (pkg/invariant, the tests' and the chaos
// suite's checker too).
type Audit struct {
	Items []ItemAudit `json:"items"`
	// Orders of the activity by status, and processed_requests by outcome/reason.
	OrdersByStatus  map[string]int64 `json:"ordersByStatus"`
	RejectedInDB    map[string]int64 `json:"rejectedInDb"` // REJECTED processed_requests by reason
	CreatedInDB     int64            `json:"createdInDb"`  // CREATED processed_requests
	PendingCompens  int64            `json:"pendingCompensations"`
	OversoldUnits   int64            `json:"oversoldUnits"`
	DuplicateUsers  int64            `json:"duplicateUsers"`    // I2 violations: users with more than one live order of an item
	DuplicateReqIDs int64            `json:"duplicateRequests"` // requestIds with more than one order
	Lost            int64            `json:"lost"`              // I4 violations: accepted orderNos that do not resolve
	Unanswered      int64            `json:"unansweredButProcessed"`
	// Violations are the checker's findings (I1–I7).
	Violations []invariant.Violation `json:"violations,omitempty"`
	// StatusChecked says I7 was checked (the audit could reach the broker).
	StatusChecked bool     `json:"statusChecked"`
	LostSample    []string `json:"lostSample,omitempty"`
}

// violations are the audit's findings of one invariant, as text.
func (au Audit) violations(inv string) []string {
	var out []string
	for _, v := range au.Violations {
		if v.Invariant == inv {
			out = append(out, v.Detail)
		}
	}
	return out
}

// audit checks the activity against the requests the client saw accepted;
// users are the workload's users by item (their limit markers are read).
func (a *auditor) audit(ctx context.Context, acc map[string]*acceptance, users map[int64][]int64) (Audit, error) {
	au := Audit{OrdersByStatus: map[string]int64{}, RejectedInDB: map[string]int64{}, StatusChecked: a.status != nil}
	scope := invariant.Scope{ActivityID: a.activityID, Items: a.items, Observed: map[string]string{}, Users: []int64{}, Drained: true}
	for rid, e := range acc {
		scope.Observed[e.orderNo] = rid
	}
	seen := map[int64]bool{}
	for _, us := range users {
		for _, u := range us {
			if !seen[u] {
				seen[u] = true
				scope.Users = append(scope.Users, u)
			}
		}
	}
	c := &invariant.Checker{Orders: a.orders, Stock: a.st, Status: a.status}
	res, err := c.Inspect(ctx, scope)
	if err != nil {
		return au, err
	}
	au.Violations = res.Violations
	snap := res.Snapshot
	au.PendingCompens = snap.PendingCompensations
	perRequest := map[string]int{}
	for _, o := range snap.Orders {
		au.OrdersByStatus[o.Status]++
		if perRequest[o.RequestID]++; perRequest[o.RequestID] == 2 {
			au.DuplicateReqIDs++
		}
		if acc[o.RequestID] == nil && perRequest[o.RequestID] == 1 {
			au.Unanswered++ // a request that timed out at the client may still have been accepted
		}
	}
	for _, d := range snap.Decisions {
		if d.Outcome == order.Rejected {
			au.RejectedInDB[d.Reason]++
			if acc[d.RequestID] == nil {
				au.Unanswered++
			}
		} else {
			au.CreatedInDB++
		}
	}
	for _, it := range res.Items {
		au.Items = append(au.Items, ItemAudit{ItemID: it.ItemID, InitialStock: it.InitialStock, DBStock: it.DBStock, RedisStock: it.RedisStock,
			LiveOrders: it.LiveOrders, LiveUnits: it.LiveUnits, LimitMarkers: it.Markers, Journal: it.Journal, BucketStocks: it.BucketStocks})
		au.OversoldUnits += max(0, it.LiveUnits-it.InitialStock)
		for _, n := range it.BucketStocks {
			au.OversoldUnits += max(0, -n)
		}
	}
	for _, v := range res.Violations {
		switch v.Invariant {
		case invariant.I2:
			au.DuplicateUsers++
		case invariant.I4:
			au.Lost++
			if len(au.LostSample) < 5 {
				au.LostSample = append(au.LostSample, v.RequestID)
			}
		}
	}
	return au, nil
}
