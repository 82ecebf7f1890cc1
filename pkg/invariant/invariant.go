// Package invariant is the one checker of the invariants I1–I7 (docs/architecture.md,
// "Invariants: where each is enforced and tested") and of "every orderNo a client
// saw in a 2xx resolves":
// the end-to-end tests (assertInvariants), the load tool's audit and the
// chaos suite's history checker all judge the stores with it. It reads
// Postgres through order.Store and Redis through stock.Store, asks the
// gateways through the small Gateway interface it declares (gateway/client's
// Client is one; the checker imports no HTTP client), and returns what it
// finds as violations; it never fails a test itself and never writes.
//
// What only a client's history can show (a replay answered with another
// orderNo, a refusal after a 2xx) is the history checker's (bench/chaos);
// what the stores show, and whether each orderNo a client was shown
// resolves, is here.
package invariant

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// Invariant ids, as docs/architecture.md numbers them.
const (
	I1 = "I1" // no oversell: stock ≥ 0 and initial = stock + Σ live quantity
	I2 = "I2" // one live order per (user, activity, item)
	I3 = "I3" // at most one order per requestId, and it is the orderNo the client was shown
	I4 = "I4" // every orderNo shown in a 2xx is an order or a REJECTED record with a reason, and GET says so
	I5 = "I5" // Redis agrees with Postgres: stock, limit markers (and, drained, no journal entry or compensation left)
	I6 = "I6" // a PAID order was never CLOSED, a CLOSED order never PAID
	I7 = "I7" // every state on orders.status, in version order, nothing uncommitted
)

// Violation is one broken invariant.
type Violation struct {
	Invariant string // I1 … I7
	RequestID string // the offending request, "" when the finding is about an item
	OrderNo   string // the orderNo a client was shown, for findings about one (I3, I4)
	Detail    string
}

func (v Violation) String() string { return v.Invariant + ": " + v.Detail }

// Checker reads the stores (and, when set, the gateways and orders.status).
type Checker struct {
	Orders *order.Store
	Stock  *stock.Store
	// Gateways, when set, are asked GET /v1/orders/{orderNo} for every
	// observed orderNo (I4), spread over them; a retriable answer is asked
	// again twice (a breaker may still be closing).
	Gateways []Gateway
	// Status, when set, is where I7 is read.
	Status *StatusTopic
	// Webhooks, when set, are endpoints I7 is judged on too (webhooks.go).
	Webhooks []WebhookEndpoint
}

// Gateway is the one call I4 makes of a gateway: GET /v1/orders/{orderNo},
// as the requestId the order records and the status it shows.
// gateway/client's Client is one (Client.OrderStatus). An error that can
// say it is worth asking again has a Retriable method (client.Error does);
// any other error is taken as no answer, which is.
type Gateway interface {
	OrderStatus(ctx context.Context, orderNo string) (requestID, status string, err error)
}

// StatusTopic is where the orders.status events are.
type StatusTopic struct {
	Client *kafka.Client
	Topic  string
	// Wait bounds the wait for the outbox to be published (0: 30 s).
	Wait time.Duration
}

// Scope is what to check.
type Scope struct {
	ActivityID int64
	// Items to check (nil: every item of the activity).
	Items []int64
	// Observed is every orderNo a client was shown in a 2xx (a 202 or a
	// replayed 200) → the requestId it answered.
	Observed map[string]string
	// Users whose limit markers are read beside the live orders' users, to
	// find stray markers; nil scans the item's markers (a Redis of the
	// caller's own: a SCAN costs every key).
	Users []int64
	// Drained: nothing is in flight, so no journal entry and no pending
	// compensation may be left (I5).
	Drained bool
}

// Item is one item as the checker saw it.
type Item struct {
	ItemID       int64
	InitialStock int64
	DBStock      int64
	// RedisStock is Σ the buckets' stock plus units a mover took and has
	// not given yet; -1 when a stock key is missing.
	RedisStock   int64
	BucketStocks []int64 // per bucket, for a bucketed item
	Journal      int64   // journal entries over its buckets
	LiveOrders   int64
	LiveUnits    int64
	Markers      int64 // limit markers found
}

// Result is a check's findings and what they were judged on.
type Result struct {
	Snapshot   order.ActivitySnapshot
	Items      []Item
	Violations []Violation
}

// Check judges the scope and returns its violations (sorted); an error
// means the stores could not be read, not a violation.
func (c *Checker) Check(ctx context.Context, s Scope) ([]Violation, error) {
	r, err := c.Inspect(ctx, s)
	if err != nil {
		return nil, err
	}
	return r.Violations, nil
}

// Inspect is Check with what it saw.
func (c *Checker) Inspect(ctx context.Context, s Scope) (*Result, error) {
	snap, err := c.Orders.Snapshot(ctx, s.ActivityID)
	if err != nil {
		return nil, err
	}
	r := &Result{Snapshot: snap}
	j := &judge{r: r, s: s, live: map[int64]map[int64][]string{}, ordersOf: map[string][]order.SnapshotOrder{},
		byNo: map[string]order.SnapshotOrder{}, decided: map[string]order.Decided{}, refused: map[string]order.Refused{}}
	j.index()
	j.orders()
	if err := c.items(ctx, j); err != nil {
		return nil, err
	}
	if err := c.observed(ctx, j); err != nil {
		return nil, err
	}
	if s.Drained && snap.PendingCompensations > 0 {
		j.violate(I5, "", "%d compensations of activity %d not yet applied in Redis", snap.PendingCompensations, s.ActivityID)
	}
	if c.Status != nil {
		for _, p := range c.status(ctx, s.ActivityID) {
			j.violate(I7, "", "%s", p)
		}
	}
	if len(c.Webhooks) > 0 {
		problems, err := c.webhooks(ctx, s.ActivityID)
		if err != nil {
			return nil, err
		}
		for _, p := range problems {
			j.violate(I7, "", "%s", p)
		}
	}
	slices.SortStableFunc(r.Violations, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Invariant, b.Invariant), cmp.Compare(a.Detail, b.Detail))
	})
	return r, nil
}

// judge holds one check's indexes of the snapshot.
type judge struct {
	r        *Result
	s        Scope
	live     map[int64]map[int64][]string // item → user → requestIds of live orders
	ordersOf map[string][]order.SnapshotOrder
	byNo     map[string]order.SnapshotOrder
	decided  map[string]order.Decided // by requestId
	refused  map[string]order.Refused // by orderNo
}

func (j *judge) violate(inv, rid, format string, args ...any) {
	j.r.Violations = append(j.r.Violations, Violation{Invariant: inv, RequestID: rid, Detail: fmt.Sprintf(format, args...)})
}

func (j *judge) violateNo(inv, rid, orderNo, format string, args ...any) {
	j.r.Violations = append(j.r.Violations, Violation{Invariant: inv, RequestID: rid, OrderNo: orderNo, Detail: fmt.Sprintf(format, args...)})
}

func (j *judge) index() {
	for _, o := range j.r.Snapshot.Orders {
		j.byNo[o.OrderNo] = o
		j.ordersOf[o.RequestID] = append(j.ordersOf[o.RequestID], o)
		if o.Status == order.StatusUnpaid || o.Status == order.StatusPaid {
			if j.live[o.ItemID] == nil {
				j.live[o.ItemID] = map[int64][]string{}
			}
			j.live[o.ItemID][o.UserID] = append(j.live[o.ItemID][o.UserID], o.RequestID)
		}
	}
	for _, d := range j.r.Snapshot.Decisions {
		j.decided[d.RequestID] = d
	}
	for _, rf := range j.r.Snapshot.Refused {
		j.refused[rf.OrderNo] = rf
	}
}

// orders: I3 (one order per requestId), I2 (one live order per user and
// item), I6 (paid and closed exclude each other, and the status agrees
// with the times).
func (j *judge) orders() {
	for _, rid := range sortedKeys(j.ordersOf) {
		if os := j.ordersOf[rid]; len(os) > 1 {
			nos := make([]string, len(os))
			for i, o := range os {
				nos[i] = o.OrderNo
			}
			j.violate(I3, rid, "request %s has %d orders %v", rid, len(os), nos)
		}
	}
	for _, item := range sortedKeys(j.live) {
		for _, user := range sortedKeys(j.live[item]) {
			if rids := j.live[item][user]; len(rids) > 1 {
				j.violate(I2, rids[0], "user %d holds %d live orders of item %d (requests %v)", user, len(rids), item, rids)
			}
		}
	}
	for _, o := range j.r.Snapshot.Orders {
		if (o.Paid && o.Closed) || (o.Status == order.StatusPaid) != o.Paid || (o.Status == order.StatusClosed) != o.Closed {
			j.violate(I6, o.RequestID, "order %s is %s with paid %v, closed %v", o.OrderNo, o.Status, o.Paid, o.Closed)
		}
	}
}

// items: I1 and I5 per item, over its buckets.
func (c *Checker) items(ctx context.Context, j *judge) error {
	rows := j.r.Snapshot.Items
	if j.s.Items != nil {
		rows = nil
		for _, id := range j.s.Items {
			i := slices.IndexFunc(j.r.Snapshot.Items, func(it order.ItemStock) bool { return it.ItemID == id })
			if i < 0 {
				return fmt.Errorf("item %d of activity %d: %w", id, j.s.ActivityID, order.ErrNotFound)
			}
			rows = append(rows, j.r.Snapshot.Items[i])
		}
	}
	for _, row := range rows {
		it := Item{ItemID: row.ItemID, InitialStock: row.InitialStock, DBStock: row.Stock, RedisStock: -1}
		for _, o := range j.r.Snapshot.Orders {
			if o.ItemID == row.ItemID && (o.Status == order.StatusUnpaid || o.Status == order.StatusPaid) {
				it.LiveOrders++
				it.LiveUnits += o.Quantity
			}
		}
		if row.Stock < 0 || row.InitialStock != row.Stock+it.LiveUnits {
			j.violate(I1, "", "item %d: initial stock %d != stock %d + live units %d", row.ItemID, row.InitialStock, row.Stock, it.LiveUnits)
		}
		if err := c.redis(ctx, j, row, &it); err != nil {
			return err
		}
		j.r.Items = append(j.r.Items, it)
	}
	return nil
}

// redis: the item's Redis stock against Postgres's, its journal, and its
// limit markers against the live orders (I5); a bucket below zero (I1).
func (c *Checker) redis(ctx context.Context, j *judge, row order.ItemStock, it *Item) error {
	base := stock.Item{ActivityID: j.s.ActivityID, ItemID: row.ItemID}
	buckets := max(row.Buckets, 1)
	stocks, err := c.Stock.BucketStocks(ctx, base, buckets)
	if err != nil {
		return err
	}
	total, missing := int64(0), false
	for b, n := range stocks {
		if n == nil {
			missing = true
			j.violate(I5, "", "item %d: the Redis stock of bucket %d is missing (db stock %d)", row.ItemID, b, row.Stock)
			continue
		}
		if buckets > 1 {
			it.BucketStocks = append(it.BucketStocks, *n)
		}
		if *n < 0 {
			j.violate(I1, "", "item %d: Redis bucket %d holds %d units", row.ItemID, b, *n)
		}
		total += *n
	}
	if buckets > 1 {
		ts, err := c.Stock.Transfers(ctx, base, buckets)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if !t.Given {
				total += t.Units
			}
		}
	}
	if !missing {
		it.RedisStock = total
		if total != row.Stock {
			j.violate(I5, "", "item %d: Redis stock %d != db stock %d", row.ItemID, total, row.Stock)
		}
	}
	all := make([]stock.Item, buckets)
	for b := range all {
		all[b] = stock.Item{ActivityID: j.s.ActivityID, ItemID: row.ItemID, Bucket: b}
	}
	if it.Journal, err = c.Stock.JournalLen(ctx, all...); err != nil {
		return err
	}
	if j.s.Drained && it.Journal != 0 {
		j.violate(I5, "", "item %d: %d journal entries left with nothing in flight", row.ItemID, it.Journal)
	}
	markers, err := c.markers(ctx, j, row.ItemID, buckets)
	if err != nil {
		return err
	}
	it.Markers = int64(len(markers))
	live := j.live[row.ItemID]
	for _, user := range sortedKeys(live) {
		if got := markers[user]; !slices.Contains(live[user], got) {
			j.violate(I5, live[user][0], "item %d user %d: limit marker %q, want the live order's request %q", row.ItemID, user, got, live[user][0])
		}
	}
	for _, user := range sortedKeys(markers) {
		if _, ok := live[user]; !ok {
			j.violate(I5, markers[user], "item %d user %d: limit marker %q without a live order", row.ItemID, user, markers[user])
		}
	}
	return nil
}

// markers reads the item's limit markers: the live orders' users' and
// Scope.Users', each in the user's bucket, or all found by a scan, where a
// marker outside its user's bucket is a violation (the per-user limit and
// the order's release look in the user's bucket) and is not the user's.
func (c *Checker) markers(ctx context.Context, j *judge, itemID int64, buckets int) (map[int64]string, error) {
	out := map[int64]string{}
	if j.s.Users == nil {
		for b := range buckets {
			m, err := c.Stock.ItemMarkers(ctx, stock.Item{ActivityID: j.s.ActivityID, ItemID: itemID, Bucket: b})
			if err != nil {
				return nil, err
			}
			for _, u := range sortedKeys(m) {
				if own := stock.BucketOf(u, buckets); own != b {
					j.violate(I5, m[u], "item %d user %d: limit marker %q in bucket %d, the user's bucket is %d", itemID, u, m[u], b, own)
					continue
				}
				out[u] = m[u]
			}
		}
		return out, nil
	}
	per := make([][]int64, buckets)
	for _, u := range j.s.Users {
		per[stock.BucketOf(u, buckets)] = append(per[stock.BucketOf(u, buckets)], u)
	}
	for u := range j.live[itemID] {
		per[stock.BucketOf(u, buckets)] = append(per[stock.BucketOf(u, buckets)], u)
	}
	for b, users := range per {
		slices.Sort(users)
		m, err := c.Stock.MarkerOwners(ctx, stock.Item{ActivityID: j.s.ActivityID, ItemID: itemID, Bucket: b}, slices.Compact(users))
		if err != nil {
			return nil, err
		}
		for u, rid := range m {
			out[u] = rid
		}
	}
	return out, nil
}

// observed: every orderNo a client was shown in a 2xx is its request's
// order, or a REJECTED record of it with a reason (I4), is not beside
// another order of that request (I3), and GET answers it (I4).
func (c *Checker) observed(ctx context.Context, j *judge) error {
	final := map[string]order.Order{} // what Postgres says of each, for GET
	for _, no := range sortedKeys(j.s.Observed) {
		rid := j.s.Observed[no]
		violate := func(inv, format string, args ...any) { j.violateNo(inv, rid, no, format, args...) }
		o, inSnapshot := j.byNo[no]
		d := j.decided[rid]
		rf, isRefused := j.refused[no]
		switch {
		case inSnapshot && o.RequestID == rid:
			final[no] = order.Order{RequestID: rid, Status: o.Status}
		case inSnapshot:
			violate(I4, "%s, shown to request %s in a 2xx, is the order of request %s", no, rid, o.RequestID)
		case d.Outcome == order.Rejected && d.OrderNo == no:
			if d.Reason == "" {
				violate(I4, "%s (request %s) was rejected without a reason", no, rid)
			}
			final[no] = order.Order{RequestID: rid, Status: order.StatusRejected}
		case isRefused && rf.RequestID == rid:
			final[no] = order.Order{RequestID: rid, Status: order.StatusRejected}
		default:
			// Another activity's orderNo (a caller that observes several):
			// read on its own.
			got, err := c.Orders.GetOrder(ctx, no)
			switch {
			case errors.Is(err, order.ErrNotFound):
				violate(I4, "%s, shown to request %s in a 2xx, is neither an order nor a REJECTED record (processed: %q %q %q)",
					no, rid, d.Outcome, d.OrderNo, d.Reason)
			case err != nil:
				return err
			case got.RequestID != rid:
				violate(I4, "%s, shown to request %s in a 2xx, is recorded for request %s", no, rid, got.RequestID)
			default:
				if got.Status == order.StatusRejected && got.Reason == "" {
					violate(I4, "%s (request %s) was rejected without a reason", no, rid)
				}
				final[no] = got
			}
		}
		if isRefused {
			continue // the request's own order is for another item
		}
		for _, o := range j.ordersOf[rid] {
			if o.OrderNo != no {
				violate(I3, "request %s was answered %s in a 2xx, but its order is %s", rid, no, o.OrderNo)
			}
		}
	}
	if len(c.Gateways) > 0 {
		c.getAll(ctx, j, final)
	}
	return nil
}

// getAll asks the gateways about every resolved orderNo (eight at a time):
// GET must answer the request's order in a decided status — the one
// Postgres holds, or for an UNPAID order any later one (the closer, a
// payment, may move it meanwhile).
func (c *Checker) getAll(ctx context.Context, j *judge, final map[string]order.Order) {
	nos := sortedKeys(final)
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for w := range min(8, len(nos)) {
		wg.Go(func() {
			gw := c.Gateways[w%len(c.Gateways)]
			for i := range work {
				no, want := nos[i], final[nos[i]]
				rid, status, err := askOrder(ctx, gw, no)
				ok := err == nil && rid == want.RequestID &&
					(status == want.Status || want.Status == order.StatusUnpaid && (status == order.StatusPaid || status == order.StatusClosed))
				if !ok {
					mu.Lock()
					j.violateNo(I4, want.RequestID, no, "GET /v1/orders/%s answered request %q status %q %v, want %s of request %s",
						no, rid, status, err, want.Status, want.RequestID)
					mu.Unlock()
				}
			}
		})
	}
	for i := range nos {
		work <- i
	}
	close(work)
	wg.Wait()
}

// askOrder asks gw about the order, again twice on an answer worth asking
// again (a breaker may still be closing).
func askOrder(ctx context.Context, gw Gateway, orderNo string) (requestID, status string, err error) {
	for try := range 3 {
		if requestID, status, err = gw.OrderStatus(ctx, orderNo); !retriable(err) || try == 2 || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return requestID, status, err
}

// retriable is gateway/client's IsRetriable without naming the client: no
// answer came, or the answer says to ask again.
func retriable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var answer interface{ Retriable() bool }
	if errors.As(err, &answer) {
		return answer.Retriable()
	}
	return true
}

// status: I7 (AuditStatus), once the outbox is published.
func (c *Checker) status(ctx context.Context, activityID int64) []string {
	wait := c.Status.Wait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	if err := WaitPublished(ctx, c.Orders, wait); err != nil {
		return []string{err.Error()}
	}
	problems, err := AuditStatus(ctx, c.Orders, c.Status.Client, c.Status.Topic, activityID)
	if err != nil {
		problems = append(problems, "reading orders.status: "+err.Error())
	}
	for i, p := range problems {
		if len(p) > 4 && p[:4] == "I7: " {
			problems[i] = p[4:]
		}
	}
	return problems
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
