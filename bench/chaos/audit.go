package chaos

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	gwclient "orderpipe/gateway/client"
	"orderpipe/pkg/event"
	"orderpipe/pkg/invariant"
	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
)

// audit holds one drained activity to the invariants (pkg/invariant, the
// checker of the tests and the bench too) and to what only its clients'
// answers show (replays, payments, requests no client sent).
type audit struct {
	orders       int // rows in orders for the activity
	rejected     int // REJECTED processed_requests
	lost         int // I4: a 2xx's orderNo that does not resolve
	duplicates   int // I2/I3: requestIds with two orders, users with two live orders of an item, replays answered with another orderNo
	dbDuplicates int // of those, in Postgres (the unique indexes make them impossible)
	// refusedReplays: replays of accepted requests refused (I3: a replay
	// returns the first answer).
	refusedReplays int
	oversold       int64
	closed         int
	paidDB         int
	lostOrderNos   []string
	// violations are the checker's findings, all of them; problems is
	// every finding as text, past five of a kind only counted.
	violations []invariant.Violation
	problems   []string
	kinds      map[string]int
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

// checker is the invariant checker of the suite's stores, gateways and
// orders.status.
func (s *Suite) checker() *invariant.Checker {
	c := &invariant.Checker{Orders: s.orders, Stock: s.stock,
		Status: &invariant.StatusTopic{Topic: event.StatusTopic, Wait: time.Minute,
			Client: &kafka.Client{Addr: kafka.TCP(s.brokers...), Timeout: 10 * time.Second}},
		Webhooks: []invariant.WebhookEndpoint{s.webhookEndpoint()}}
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, u := range s.httpURLs {
		api := gwclient.New(u)
		api.HTTPClient = hc
		c.Gateways = append(c.Gateways, api)
	}
	return c
}

// runAudit checks the activity once nothing is in flight: the invariant
// checker on the stores, every orderNo observed (orderNo → requestId) in a
// 2xx resolving through GET, and, from what the clients were told (res),
// replays and payments and no order that no client sent.
func (s *Suite) runAudit(ctx context.Context, act int64, items []int64, observed map[string]string, res *loadResult) (*audit, error) {
	users := make([]int64, s.cfg.Users)
	for u := range users {
		users[u] = int64(u + 1)
	}
	r, err := s.checker().Inspect(ctx, invariant.Scope{ActivityID: act, Items: items, Observed: observed, Users: users, Drained: true})
	if err != nil {
		return nil, err
	}
	a := &audit{violations: r.Violations, orders: len(r.Snapshot.Orders)}
	for _, v := range r.Violations {
		a.problem("%s", v)
		switch v.Invariant {
		case invariant.I4:
			a.lost++
			a.lostOrderNos = append(a.lostOrderNos, v.OrderNo)
		case invariant.I2, invariant.I3:
			a.duplicates++
		}
	}
	for _, d := range r.Snapshot.Decisions {
		if d.Outcome == order.Rejected {
			a.rejected++
		}
	}
	for _, it := range r.Items {
		a.oversold += max(0, it.LiveUnits-it.InitialStock)
	}
	byNo, perRequest := a.countOrders(r.Snapshot.Orders)
	a.judgeAnswers(res, byNo, perRequest)
	a.finish()
	return a, nil
}

// countOrders counts the closed and paid orders and the duplicates Postgres
// holds (a requestId's second order, a user's second live order of an item),
// and returns the orders by orderNo and the order count of each requestId.
func (a *audit) countOrders(orders []order.SnapshotOrder) (byNo map[string]order.SnapshotOrder, perRequest map[string]int) {
	byNo, perRequest = map[string]order.SnapshotOrder{}, map[string]int{}
	live := map[[2]int64]int{}
	for _, o := range orders {
		byNo[o.OrderNo] = o
		if perRequest[o.RequestID]++; perRequest[o.RequestID] == 2 {
			a.dbDuplicates++
		}
		if o.Status == order.StatusUnpaid || o.Status == order.StatusPaid {
			if live[[2]int64{o.ItemID, o.UserID}]++; live[[2]int64{o.ItemID, o.UserID}] == 2 {
				a.dbDuplicates++
			}
		}
		switch o.Status {
		case order.StatusClosed:
			a.closed++
		case order.StatusPaid:
			a.paidDB++
		}
	}
	return byNo, perRequest
}

// judgeAnswers holds what the clients were told (res) to the orders: a
// replay names the first answer's orderNo and is not refused (I3), an order
// was sent by some client, and a payment's answer is the order's status (I6).
func (a *audit) judgeAnswers(res *loadResult, byNo map[string]order.SnapshotOrder, perRequest map[string]int) {
	res.mu.Lock()
	defer res.mu.Unlock()
	for _, rid := range res.accepted {
		r := res.requests[rid]
		if len(r.mismatched) > 0 {
			a.duplicates += len(r.mismatched)
			a.problem("I3: replay of %s (first answer %s) answered %v", rid, r.orderNo, r.mismatched)
		}
		if len(r.refused) > 0 {
			a.refusedReplays += len(r.refused)
			a.problem("I3: replay of %s (first answer %s) answered %v", rid, r.orderNo, r.refused)
		}
	}
	for rid := range perRequest {
		if _, sent := res.requests[rid]; !sent {
			a.problem("phantom order for request %s that no client sent", rid)
		}
	}
	for no, p := range res.pays {
		o, ok := byNo[no]
		switch {
		case p.status == http.StatusOK && (!ok || o.Status != order.StatusPaid):
			a.problem("I6: order %s was answered PAID but is %q", no, o.Status)
		case p.code == "ORDER_CLOSED" && (!ok || o.Status != order.StatusClosed):
			a.problem("I6: order %s was answered ORDER_CLOSED but is %q", no, o.Status)
		}
	}
}

// observedOf is every orderNo the load's clients were shown in a 2xx (the
// first answer and any other a replay named) → its requestId.
func observedOf(res *loadResult) map[string]string {
	res.mu.Lock()
	defer res.mu.Unlock()
	out := map[string]string{}
	for _, rid := range res.accepted {
		r := res.requests[rid]
		for _, no := range append([]string{r.orderNo}, r.mismatched...) {
			out[no] = rid
		}
	}
	return out
}

func stockItem(act, item int64) stock.Item { return stock.Item{ActivityID: act, ItemID: item} }
