package chaos

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"orderpipe/pkg/order"
)

// The history checker: after the heal and the drain it holds what every
// client was told (the history) to the stores and to the invariants (docs/architecture.md):
//
//   - I3, from the history: every 2xx answer of a requestId names its first
//     orderNo (the one of the earliest 2xx answer); no attempt that started
//     after a 2xx is refused (a replay returns the first answer).
//   - I6, from the history: every payment answered PAID is PAID and was
//     never closed; every ORDER_CLOSED is CLOSED and was never paid; every
//     cancel answered 200 is CLOSED and was never paid, every ORDER_PAID
//     PAID and never closed.
//   - Each requestId's operations, as its clients saw them, are linearizable
//     on the contract's model of a request (linz.go).
//   - The rest is pkg/invariant's (runAudit), the checker of the tests and
//     the bench too: every orderNo seen in any 2xx (202, or 200 replayed)
//     is an order of its requestId or a REJECTED record, and GET
//     /v1/orders/{orderNo} answers it in a final status — never 404 (I4);
//     the requestId's order, if any, is that orderNo (I3); I1, I2, I5, I6
//     on the stores and I7 on orders.status. Then no order that no client
//     sent, and `orderpipe reconciler --once` exits 0.
//   - A refusal holds nothing, from the history: a requestId whose every
//     POST was answered, none 2xx and none with an unknown outcome (Op.Unknown:
//     "the outcome is unknown", another 5xx), has no order and no decision
//     in Postgres — each answer said nothing was reserved.

type violation struct {
	requestID string // the offending requestId, "" when the rule is about the stores
	msg       string
}

type checkResult struct {
	t0  time.Time
	ops map[string][]Op // by requestId

	requests, calls, accepted, timeouts, replays, gaveUp, orders int
	answers, pays, cancels                                       map[string]int
	audit                                                        *audit
	reconcileExit                                                int
	violations                                                   []violation
	lin                                                          linResult
}

func (c *checkResult) violate(rid, format string, args ...any) {
	c.violations = append(c.violations, violation{requestID: rid, msg: fmt.Sprintf(format, args...)})
}

// checkHistory judges the history of sale act.
func (s *Suite) checkHistory(ctx context.Context, act int64, items []int64, t0 time.Time, ops []Op) (*checkResult, error) {
	c := &checkResult{t0: t0, ops: byRequest(ops), answers: map[string]int{}, pays: map[string]int{}, cancels: map[string]int{}, reconcileExit: -1}

	// Postgres, one snapshot: the orders, for the payments' answers.
	snap, err := s.orders.Snapshot(ctx, act)
	if err != nil {
		return nil, err
	}
	orders := map[string]order.SnapshotOrder{} // by orderNo
	for _, o := range snap.Orders {
		orders[o.OrderNo] = o
	}
	c.orders = len(orders)

	// The history, requestId by requestId (in a stable order for the report).
	rids := make([]string, 0, len(c.ops))
	for rid := range c.ops {
		rids = append(rids, rid)
	}
	sort.Strings(rids)
	shownNos := map[string]string{} // orderNo seen in a 2xx → requestId
	lr := newLoadResult()           // for runAudit: every requestId sent
	for _, rid := range rids {
		oks := c.tally(rid, orders, lr)
		if _, sent := lr.requests[rid]; sent {
			c.requests++
		}
		if len(oks) == 0 {
			continue
		}
		c.accepted++
		c.checkFirstAnswer(rid, oks)
		for _, o := range oks {
			shownNos[o.OrderNo] = rid
		}
	}

	c.checkRefused(rids, snap)

	// The stores (I1–I7) and every orderNo shown resolving through GET
	// (pkg/invariant), phantoms (the answers were judged above).
	a, err := s.runAudit(ctx, act, items, shownNos, lr)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	c.addAudit(a)
	code, out := s.reconcile(ctx)
	c.reconcileExit = code
	if code != 0 {
		c.violate("", "I5: reconciler --once exit %d:\n%s", code, out)
	}
	sort.SliceStable(c.violations, func(i, j int) bool { return c.violations[i].msg < c.violations[j].msg })
	return c, nil
}

// tally counts one requestId's operations, judges its payments and cancels
// against the orders (by orderNo), records its body in lr the first time a
// POST carried one, and returns its POSTs answered 2xx.
func (c *checkResult) tally(rid string, orders map[string]order.SnapshotOrder, lr *loadResult) (oks []Op) {
	for _, o := range c.ops[rid] {
		if o.Kind == opGiveUp {
			c.gaveUp++
			continue
		}
		c.calls++
		switch o.Kind {
		case opPay:
			c.pays[o.answer0()]++
			c.checkEnd(rid, o, orders)
			continue
		case opCancel:
			c.cancels[o.answer0()]++
			c.checkEnd(rid, o, orders)
			continue
		case opGet:
			continue
		}
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
	return oks
}

// checkFirstAnswer holds a requestId's 2xx answers (oks, sorted here by
// when they came back) to I3: each names the first one's orderNo, and no
// attempt sent after the first 2xx is refused.
func (c *checkResult) checkFirstAnswer(rid string, oks []Op) {
	sort.SliceStable(oks, func(i, j int) bool { return oks[i].End.Before(oks[j].End) })
	first := oks[0]
	for _, o := range oks[1:] {
		if o.OrderNo != first.OrderNo {
			c.violate(rid, "I3: %s: attempt #%d was answered %d with orderNo %s, but the first 2xx (attempt #%d, %+.3fs) named %s",
				rid, o.Attempt, o.Status, o.OrderNo, first.Attempt, first.End.Sub(c.t0).Seconds(), first.OrderNo)
		}
	}
	for _, o := range c.ops[rid] {
		if o.Kind == opOrder && o.Status != 0 && !o.ok2xx() && !o.retriable() && o.Start.After(first.End) {
			c.violate(rid, "I3: %s: attempt #%d, sent after the first 2xx named %s, was refused %d %s",
				rid, o.Attempt, first.OrderNo, o.Status, o.Code)
		}
	}
}

// addAudit takes the audit's violations and, of its problems, those that
// are not one of these violations as text: phantoms and what the clients'
// replays and payments were told.
func (c *checkResult) addAudit(a *audit) {
	c.audit = a
	for _, v := range a.violations {
		c.violate(v.RequestID, "%s", v)
	}
	for _, p := range a.problems {
		if !strings.HasPrefix(p, "I") || strings.HasPrefix(p, "I3: replay") || strings.HasPrefix(p, "I6: order") {
			c.violate("", "%s", p) // what only the history shows
		}
	}
}

// checkRefused: a requestId only refused (every POST answered, none 2xx,
// none of unknown outcome) has no order and no decision.
func (c *checkResult) checkRefused(rids []string, snap order.ActivitySnapshot) {
	held := map[string]string{}
	for _, o := range snap.Orders {
		held[o.RequestID] = fmt.Sprintf("order %s (%s)", o.OrderNo, o.Status)
	}
	for _, d := range snap.Decisions {
		if _, ok := held[d.RequestID]; !ok {
			held[d.RequestID] = fmt.Sprintf("decision %s %s", d.Outcome, d.OrderNo)
		}
	}
	for _, rid := range rids {
		what, ok := held[rid]
		if !ok {
			continue
		}
		var answers []string
		refused := false
		for _, o := range c.ops[rid] {
			if o.Kind != opOrder {
				continue
			}
			if o.Status == 0 || o.ok2xx() || o.Unknown {
				refused = false
				break
			}
			refused = true
			answers = append(answers, fmt.Sprintf("#%d %d %s (%+.3fs)", o.Attempt, o.Status, o.Code, o.End.Sub(c.t0).Seconds()))
		}
		if refused {
			c.violate(rid, "refused, yet held: %s: every attempt said nothing was reserved (%s), but Postgres has %s",
				rid, strings.Join(answers, ", "), what)
		}
	}
}

// checkEnd judges a pay or a cancel by the end of the order its answer
// told (I6): a payment answered PAID, or a cancel answered ORDER_PAID, is
// PAID and never closed; a cancel answered 200 CLOSED, or a payment
// ORDER_CLOSED, is CLOSED and never paid.
func (c *checkResult) checkEnd(rid string, o Op, orders map[string]order.SnapshotOrder) {
	var answer, told string
	switch {
	case o.Kind == opPay && o.Status == http.StatusOK:
		answer, told = "PAID", order.StatusPaid
	case o.Kind == opCancel && o.Status == http.StatusOK:
		answer, told = "200 CLOSED", order.StatusClosed
	case o.Kind == opPay && o.Code == "ORDER_CLOSED":
		answer, told = o.Code, order.StatusClosed
	case o.Kind == opCancel && o.Code == "ORDER_PAID":
		answer, told = o.Code, order.StatusPaid
	default:
		return
	}
	po, ok := orders[o.OrderNo]
	other, atOther := "closed", po.Closed
	if told == order.StatusClosed {
		other, atOther = "paid", po.Paid
	}
	if !ok || po.Status != told || atOther {
		c.violate(rid, "I6: %s: %s of %s was answered %s, but the order is %q (%s %v)", rid, o.Kind, o.OrderNo, answer, po.Status, other, atOther)
	}
}

// checkLinearizable adds the linearizability check of the history to the
// result: each illegal requestId is a violation; html is where the illegal
// histories' visualisation goes.
func (c *checkResult) checkLinearizable(ops []Op, html string) {
	c.lin = checkLinearizable(ops, c.t0, linPerHistory, linBudget, html)
	for _, rid := range c.lin.Illegal {
		c.violate(rid, "linearizability: %s: no sequential order of its operations explains what its clients were told (%s)", rid, c.lin.Visualisation)
	}
	if c.lin.VisualiseErr != nil {
		c.violate("", "linearizability: writing the visualisation: %v", c.lin.VisualiseErr)
	}
}

// The linearizability check's time: per history (a request's few dozen
// operations take microseconds), and in all (past it the rest are unknown).
const (
	linPerHistory = 5 * time.Second
	linBudget     = 2 * time.Minute
)

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
