package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The history checker: after the heal and the drain it holds what every
// client was told (the history) to the stores and to the invariants (docs/architecture.md):
//
//   - I3: every 2xx answer of a requestId names its first orderNo (the one
//     of the earliest 2xx answer); no attempt that started after a 2xx is
//     refused (a replay returns the first answer); the requestId's order in
//     Postgres, if any, is that orderNo.
//   - I4: every orderNo seen in any 2xx (202, or 200 replayed) is an order
//     of its requestId or a REJECTED record (processed_requests, or a
//     refused reservation) in Postgres, and GET /v1/orders/{orderNo}
//     answers it with a final status — never 404.
//   - I6: every payment answered PAID is PAID and was never closed; every
//     ORDER_CLOSED is CLOSED and was never paid.
//   - I1, I2, I5, I6 on the stores (runAudit: no unit sold twice, stock
//     conserved in Postgres and Redis, markers, journal), no order that no
//     client sent, and `orderpipe reconciler --once` exits 0.

type violation struct {
	requestID string // the offending requestId, "" when the rule is about the stores
	msg       string
}

type checkResult struct {
	t0  time.Time
	ops map[string][]Op // by requestId

	requests, calls, accepted, timeouts, replays, gaveUp, orders int
	answers, pays                                                map[string]int
	audit                                                        *audit
	reconcileExit                                                int
	violations                                                   []violation
}

func (c *checkResult) violate(rid, format string, args ...any) {
	c.violations = append(c.violations, violation{requestID: rid, msg: fmt.Sprintf(format, args...)})
}

type pgOrder struct {
	orderNo, requestID, status string
	paid, closed               bool
}

// checkHistory judges the history of sale act.
func (s *Suite) checkHistory(ctx context.Context, act int64, items []int64, t0 time.Time, ops []Op) (*checkResult, error) {
	c := &checkResult{t0: t0, ops: byRequest(ops), answers: map[string]int{}, pays: map[string]int{}, reconcileExit: -1}

	// Postgres, one snapshot.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)            //nolint:errcheck
	orders := map[string]pgOrder{}    // by orderNo
	orderOf := map[string][]pgOrder{} // by requestId
	rows, err := tx.Query(ctx, `SELECT order_no, request_id, status, paid_at IS NOT NULL, closed_at IS NOT NULL
		FROM orders WHERE activity_id = $1`, act)
	if err != nil {
		return nil, fmt.Errorf("reading orders: %w", err)
	}
	for rows.Next() {
		var o pgOrder
		if err := rows.Scan(&o.orderNo, &o.requestID, &o.status, &o.paid, &o.closed); err != nil {
			rows.Close()
			return nil, err
		}
		orders[o.orderNo] = o
		orderOf[o.requestID] = append(orderOf[o.requestID], o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	c.orders = len(orders)
	processed, err := processedRequests(ctx, tx, act)
	if err != nil {
		return nil, err
	}
	refused, err := refusedReservations(ctx, tx, act)
	if err != nil {
		return nil, err
	}
	tx.Rollback(ctx) //nolint:errcheck

	// The history, requestId by requestId (in a stable order for the report).
	rids := make([]string, 0, len(c.ops))
	for rid := range c.ops {
		rids = append(rids, rid)
	}
	sort.Strings(rids)
	shownNos := map[string]string{} // orderNo seen in a 2xx → requestId
	lr := newLoadResult()           // for runAudit: every requestId sent
	for _, rid := range rids {
		var oks []Op
		for _, o := range c.ops[rid] {
			switch o.Kind {
			case opGiveUp:
				c.gaveUp++
				continue
			case opPay:
				c.calls++
				c.pays[o.answer0()]++
				c.checkPay(rid, o, orders)
				continue
			case opGet:
				c.calls++
				continue
			}
			c.calls++
			c.answers[o.answer0()]++
			if o.Status == 0 && o.Err == "client timeout" {
				c.timeouts++
			}
			if o.ok2xx() {
				oks = append(oks, o)
				if o.Replayed {
					c.replays++
				}
			}
			if _, ok := lr.requests[rid]; !ok && o.Payload != nil {
				lr.requests[rid] = &request{body: *o.Payload}
			}
		}
		if _, sent := lr.requests[rid]; sent {
			c.requests++
		}
		if len(oks) == 0 {
			continue
		}
		c.accepted++
		sort.SliceStable(oks, func(i, j int) bool { return oks[i].End.Before(oks[j].End) })
		first := oks[0]
		for _, o := range oks[1:] {
			if o.OrderNo != first.OrderNo {
				c.violate(rid, "I3: %s: attempt #%d was answered %d with orderNo %s, but the first 2xx (attempt #%d, %+.3fs) named %s",
					rid, o.Attempt, o.Status, o.OrderNo, first.Attempt, first.End.Sub(t0).Seconds(), first.OrderNo)
			}
		}
		for _, o := range c.ops[rid] {
			if o.Kind == opOrder && o.Status != 0 && !o.ok2xx() && !o.retriable() && o.Start.After(first.End) {
				c.violate(rid, "I3: %s: attempt #%d, sent after the first 2xx named %s, was refused %d %s",
					rid, o.Attempt, first.OrderNo, o.Status, o.Code)
			}
		}
		for _, o := range oks {
			if _, seen := shownNos[o.OrderNo]; seen {
				continue
			}
			shownNos[o.OrderNo] = rid
			p := processed[rid]
			switch po, isOrder := orders[o.OrderNo]; {
			case isOrder && po.requestID == rid:
			case p.outcome == "REJECTED" && p.orderNo == o.OrderNo:
			case refused[o.OrderNo] == rid:
			default:
				c.violate(rid, "I4: %s: orderNo %s (answered %d to attempt #%d) is neither an order nor a REJECTED record (processed_requests: %q %q %q)",
					rid, o.OrderNo, o.Status, o.Attempt, p.outcome, p.orderNo, p.reason)
			}
		}
		for _, po := range orderOf[rid] {
			if po.orderNo != first.OrderNo {
				c.violate(rid, "I3: %s: its order is %s, but the first 2xx named %s", rid, po.orderNo, first.OrderNo)
			}
		}
	}

	// What a storefront asking about each orderNo it was shown is told.
	for no, ans := range s.getAll(ctx, shownNos) {
		if ans.status != http.StatusOK || !slices.Contains([]string{"UNPAID", "PAID", "CLOSED", "REJECTED"}, ans.orderStatus) {
			c.violate(shownNos[no], "I4: %s: GET /v1/orders/%s after the drain answers %d %s%s", shownNos[no], no, ans.status, ans.orderStatus, ans.code)
		}
	}

	// The stores: I1, I2, I5, I6 and phantoms (the answers were judged above).
	a, err := runAudit(ctx, s.pool, s.rdb, s.stock, act, items, s.cfg.Users, lr)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	c.audit = a
	for _, p := range a.problems {
		c.violate("", "%s", p)
	}
	for _, p := range s.auditStatus(ctx, act) {
		c.violate("", "%s", p)
	}
	code, out := s.reconcile(ctx)
	c.reconcileExit = code
	if code != 0 {
		c.violate("", "I5: reconciler --once exit %d:\n%s", code, out)
	}
	sort.SliceStable(c.violations, func(i, j int) bool { return c.violations[i].msg < c.violations[j].msg })
	return c, nil
}

// checkPay: a payment answered PAID is PAID and never closed; ORDER_CLOSED
// is CLOSED and never paid (I6).
func (c *checkResult) checkPay(rid string, o Op, orders map[string]pgOrder) {
	po, ok := orders[o.OrderNo]
	switch {
	case o.Status == http.StatusOK && (!ok || po.status != "PAID" || po.closed):
		c.violate(rid, "I6: %s: pay of %s was answered PAID, but the order is %q (closed %v)", rid, o.OrderNo, po.status, po.closed)
	case o.Code == "ORDER_CLOSED" && (!ok || po.status != "CLOSED" || po.paid):
		c.violate(rid, "I6: %s: pay of %s was answered ORDER_CLOSED, but the order is %q (paid %v)", rid, o.OrderNo, po.status, po.paid)
	}
}

// answer0 is the op's answer without the orderNo, for counting.
func (o Op) answer0() string {
	switch {
	case o.Status == 0:
		return "no answer"
	case o.Replayed:
		return fmt.Sprintf("%d replayed", o.Status)
	}
	return strings.TrimSpace(fmt.Sprintf("%d %s", o.Status, o.Code))
}

type getAnswer struct {
	status            int
	orderStatus, code string
}

// getAll asks the gateways about every orderNo (eight at a time, spread
// over the gateways).
func (s *Suite) getAll(ctx context.Context, nos map[string]string) map[string]getAnswer {
	out := map[string]getAnswer{}
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for no := range work {
				a := getAnswer{}
				u := s.httpURLs[w%len(s.httpURLs)] + "/v1/orders/" + no
				for range 3 { // a gateway's breaker may still be closing
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
					res, err := client.Do(req)
					if err != nil {
						a = getAnswer{code: err.Error()}
						continue
					}
					var body struct {
						Status string `json:"status"`
						Error  struct {
							Code string `json:"code"`
						} `json:"error"`
					}
					json.NewDecoder(res.Body).Decode(&body) //nolint:errcheck
					res.Body.Close()
					a = getAnswer{status: res.StatusCode, orderStatus: body.Status, code: body.Error.Code}
					if res.StatusCode < 500 {
						break
					}
					time.Sleep(500 * time.Millisecond)
				}
				mu.Lock()
				out[no] = a
				mu.Unlock()
			}
		}()
	}
	for no := range nos {
		work <- no
	}
	close(work)
	wg.Wait()
	return out
}
