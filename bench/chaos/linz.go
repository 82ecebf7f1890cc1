package chaos

import (
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The linearizability check: each requestId's operations, as its clients
// saw them (call and return times, what was asked, what was answered), must
// be explained by some sequential order of the same operations, each taking
// effect at one instant between its call and its return, on the contract's
// state machine of one request:
//
//	none → PENDING (reserved) → UNPAID → PAID
//	                           ↘ REJECTED  ↘ CLOSED (payment timeout, or cancelled)
//
// The worker's decision and the closer's close are not the clients'
// operations: they happen on their own, at any instant, and the model lets
// any of them happen before each operation (a nondeterministic step), so
// they are seen only as the clients observe them (GET, pay's ORDER_CLOSED,
// cancel's ORDER_PAID). What the contract promises, operation by operation:
//
//   - a POST answered 2xx names the request's one orderNo: the first reserves
//     (none → PENDING), every later one, replayed or not, names the same;
//     a replay answered before any reservation is impossible;
//   - a definite refusal (4xx but 429) happens only while nothing is reserved
//     for the requestId; 429 and a 503 that says nothing was reserved
//     change nothing, in any state;
//   - GET answers the status the order has at some instant of the call
//     (PENDING only before the worker's decision: Postgres is read first);
//     404 only while it is PENDING (Redis may have lost the reservation);
//   - pay: 200 from UNPAID or PAID, and the order is PAID; ORDER_CLOSED only
//     when CLOSED, ORDER_REJECTED only when REJECTED, ORDER_PENDING or 404
//     only while PENDING;
//   - cancel: 200 from UNPAID or from an order it cancelled already, and the
//     order is CLOSED (cancelled); ORDER_PAID only when PAID; ORDER_CLOSED
//     only when the closer closed it;
//   - an operation of unknown outcome (no answer, the client's timeout, a 5xx
//     that may have acted; for pay and cancel any 5xx, as the row may have
//     changed before Postgres stopped answering) has no return time: it may
//     take effect at any instant after its call, or never, and its answer
//     matches any result.
//
// Each requestId is its own history (porcupine's partition): the contract
// says nothing across requests that this check could judge. A history the
// checker rejects is written as porcupine's HTML visualisation.

// linInput is what an operation asked.
type linInput struct {
	RequestID string
	Kind      string // opOrder, opGet, opPay, opCancel
	OrderNo   string // get, pay, cancel: the orderNo asked about
}

// linOutput is what it was answered, reduced to what the model judges.
type linOutput struct {
	Outcome string
	OrderNo string // order 2xx: the orderNo answered
	Status  string // get 200: the order's status
	Reason  string // get 200 CLOSED: why
}

// Outcomes.
const (
	outAccepted  = "accepted"  // order 202
	outReplayed  = "replayed"  // order 200 replayed
	outRefused   = "refused"   // order: a definite refusal (nothing reserved, for good)
	outNoEffect  = "no-effect" // 429, a 503 that says nothing was reserved, or 409 IDEMPOTENCY_KEY_IN_PROGRESS
	outUnknown   = "unknown"   // no answer, or one that may have acted
	outStatus    = "status"    // get 200
	outNotFound  = "not-found" // 404 ORDER_NOT_FOUND
	outPaid      = "paid"      // pay 200, cancel 409 ORDER_PAID
	outClosed    = "closed"    // 409 ORDER_CLOSED
	outCancelled = "cancelled" // cancel 200
	outRejected  = "rejected"  // 409 ORDER_REJECTED
	outPending   = "pending"   // 409 ORDER_PENDING
)

// Order statuses of the model (Status "" is a request with nothing reserved).
const (
	stPending  = "PENDING"
	stUnpaid   = "UNPAID"
	stPaid     = "PAID"
	stClosed   = "CLOSED"
	stRejected = "REJECTED"
	// Why an order is CLOSED: cancelled by its buyer, or anything else (the
	// closer's payment timeout).
	closedCancelled = "CANCELLED"
	closedTimeout   = "TIMEOUT"
)

// linState is one request's state.
type linState struct {
	Status  string
	Closed  string // closedCancelled or closedTimeout, when CLOSED
	OrderNo string // "" until an answer names it
}

// linOp turns a recorded op into porcupine's operation; ok is false for ops
// that made no call (a give-up). Times are nanoseconds since t0; an op of
// unknown outcome returns at infinity.
func linOp(o Op, t0 time.Time) (porcupine.Operation, bool) {
	if o.Kind == opGiveUp || o.RequestID == "" {
		return porcupine.Operation{}, false
	}
	in := linInput{RequestID: o.RequestID, Kind: o.Kind}
	if o.Kind != opOrder {
		in.OrderNo = o.OrderNo
	}
	out := linOutcome(o)
	ret := int64(o.End.Sub(t0))
	if out.Outcome == outUnknown {
		ret = math.MaxInt64
	}
	return porcupine.Operation{ClientId: o.Client, Input: in, Call: int64(o.Start.Sub(t0)), Output: out, Return: ret, Metadata: o}, true
}

// linOutcome reduces an op's answer to the model's output.
func linOutcome(o Op) linOutput {
	if o.Status == 0 || o.Status >= 500 && (o.Kind != opOrder || o.Unknown) {
		return linOutput{Outcome: outUnknown}
	}
	// A 429, a 503 that says nothing was done, and a 409 saying the first
	// request with this Idempotency-Key is not settled yet (its answer may
	// have been sent, its durability mark not written: the client retries)
	// decide nothing.
	if o.Status == http.StatusTooManyRequests || o.Status == http.StatusServiceUnavailable || o.Code == "IDEMPOTENCY_KEY_IN_PROGRESS" {
		return linOutput{Outcome: outNoEffect}
	}
	switch o.Kind {
	case opOrder:
		switch {
		case o.ok2xx() && o.Replayed:
			return linOutput{Outcome: outReplayed, OrderNo: o.OrderNo}
		case o.ok2xx():
			return linOutput{Outcome: outAccepted, OrderNo: o.OrderNo}
		case o.Status >= 400 && o.Status < 500:
			return linOutput{Outcome: outRefused}
		}
	case opGet:
		switch {
		case o.Status == http.StatusOK && o.OrderStatus != "":
			return linOutput{Outcome: outStatus, Status: o.OrderStatus, Reason: o.Reason}
		case o.Code == "ORDER_NOT_FOUND":
			return linOutput{Outcome: outNotFound}
		}
	case opPay, opCancel:
		switch {
		case o.Status == http.StatusOK && o.Kind == opPay:
			return linOutput{Outcome: outPaid}
		case o.Status == http.StatusOK:
			return linOutput{Outcome: outCancelled}
		case o.Code == "ORDER_PAID":
			return linOutput{Outcome: outPaid}
		case o.Code == "ORDER_CLOSED":
			return linOutput{Outcome: outClosed}
		case o.Code == "ORDER_REJECTED":
			return linOutput{Outcome: outRejected}
		case o.Code == "ORDER_PENDING":
			return linOutput{Outcome: outPending}
		case o.Code == "ORDER_NOT_FOUND":
			return linOutput{Outcome: outNotFound}
		}
	}
	// An answer the model has no rule for constrains nothing.
	return linOutput{Outcome: outUnknown}
}

// decided are the states the worker and the closer may move s to on their
// own before an operation takes effect (s itself among them).
func decided(s linState) []linState {
	timedOut := linState{Status: stClosed, Closed: closedTimeout, OrderNo: s.OrderNo}
	with := func(st string) linState { return linState{Status: st, OrderNo: s.OrderNo} }
	switch s.Status {
	case stPending:
		return []linState{s, with(stUnpaid), with(stRejected), timedOut}
	case stUnpaid:
		return []linState{s, timedOut}
	}
	return []linState{s}
}

// linStep is the model's step from one state (after the worker's and the
// closer's moves): the states the operation may leave, none if it cannot
// have been answered so.
func linStep(s linState, in linInput, out linOutput) []linState {
	if in.OrderNo != "" {
		// Asked about an orderNo this request never named: only its own
		// (the orderNo of its first 2xx) is ever asked about.
		if s.Status == "" || s.OrderNo != "" && s.OrderNo != in.OrderNo {
			return nil
		}
		s.OrderNo = in.OrderNo
	}
	switch in.Kind {
	case opOrder:
		return orderStep(s, out)
	case opGet:
		return getStep(s, out)
	case opPay, opCancel:
		return settleStep(s, in.Kind, out)
	}
	return []linState{s}
}

// stepTo is the step to one state if the answer fits (ok), none if not.
func stepTo(ok bool, to linState) []linState {
	if !ok {
		return nil
	}
	return []linState{to}
}

// orderStep is a POST /v1/orders: only the first may be accepted (the
// others replay it), and every 2xx names the same orderNo.
func orderStep(s linState, out linOutput) []linState {
	switch out.Outcome {
	case outAccepted, outReplayed:
		if s.Status == "" {
			return stepTo(out.Outcome == outAccepted, linState{Status: stPending, OrderNo: out.OrderNo})
		}
		if s.OrderNo != "" && s.OrderNo != out.OrderNo {
			return nil // a second orderNo for one request
		}
		s.OrderNo = out.OrderNo
		return []linState{s}
	case outRefused:
		return stepTo(s.Status == "", s)
	case outUnknown:
		if s.Status == "" {
			return []linState{s, {Status: stPending}}
		}
	}
	return []linState{s}
}

// getStep is a GET of the order: it reads the status (and whether a closed
// order was cancelled) without changing it; only a pending order is not
// found yet.
func getStep(s linState, out linOutput) []linState {
	switch out.Outcome {
	case outStatus:
		ok := s.Status == out.Status
		if ok && s.Status == stClosed && out.Reason != "" {
			ok = (s.Closed == closedCancelled) == (out.Reason == closedCancelled)
		}
		return stepTo(ok, s)
	case outNotFound:
		return stepTo(s.Status == stPending, s)
	}
	return []linState{s}
}

// settleStep is a payment or a cancel (kind): it moves an unpaid order to
// paid or to cancelled, and otherwise answers why it could not; an unknown
// answer may or may not have moved it.
func settleStep(s linState, kind string, out linOutput) []linState {
	cancelled := linState{Status: stClosed, Closed: closedCancelled, OrderNo: s.OrderNo}
	switch out.Outcome {
	case outPaid:
		if kind == opPay {
			return stepTo(s.Status == stUnpaid || s.Status == stPaid, linState{Status: stPaid, OrderNo: s.OrderNo})
		}
		return stepTo(s.Status == stPaid, s)
	case outCancelled:
		return stepTo(s.Status == stUnpaid || s == cancelled, cancelled)
	case outClosed:
		return stepTo(s.Status == stClosed && (kind == opPay || s.Closed == closedTimeout), s)
	case outRejected:
		return stepTo(s.Status == stRejected, s)
	case outPending, outNotFound:
		return stepTo(s.Status == stPending, s)
	case outUnknown:
		if s.Status == stUnpaid && kind == opPay {
			return []linState{s, {Status: stPaid, OrderNo: s.OrderNo}}
		}
		if s.Status == stUnpaid {
			return []linState{s, cancelled}
		}
	}
	return []linState{s}
}

// requestModel is the contract's model of one request, partitioned by
// requestId.
var requestModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var rids []string
		for _, o := range history {
			rid := o.Input.(linInput).RequestID
			if _, ok := by[rid]; !ok {
				rids = append(rids, rid)
			}
			by[rid] = append(by[rid], o)
		}
		sort.Strings(rids)
		out := make([][]porcupine.Operation, len(rids))
		for i, rid := range rids {
			out[i] = by[rid]
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: func(state, input, output any) []any {
		var next []any
		for _, s := range decided(state.(linState)) {
			for _, n := range linStep(s, input.(linInput), output.(linOutput)) {
				next = append(next, n)
			}
		}
		return next
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		what := in.Kind
		if in.OrderNo != "" {
			what += " " + in.OrderNo
		}
		return fmt.Sprintf("%s → %s", what, strings.TrimSpace(strings.Join([]string{out.Outcome, out.OrderNo, out.Status, out.Reason}, " ")))
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		if s.Status == "" {
			return "nothing reserved"
		}
		return strings.TrimSpace(strings.Join([]string{s.Status, s.Closed, s.OrderNo}, " "))
	},
	DescribeOperationMetadata: func(info any) string {
		o, ok := info.(Op)
		if !ok {
			return ""
		}
		return o.answer()
	},
}

// linResult is the check of one run's histories.
type linResult struct {
	Histories, Operations int
	Illegal               []string // the requestIds whose history no sequential order explains
	Unknown               []string // those the checker ran out of time on
	Visualisation         string   // the HTML of the illegal histories, if any
	VisualiseErr          error
}

// Verdict is "linearizable", "NOT linearizable" or "unknown" (a history
// the checker ran out of time on, none illegal).
func (r linResult) Verdict() string {
	switch {
	case r.Histories == 0:
		return "unchecked"
	case len(r.Illegal) > 0:
		return "NOT linearizable"
	case len(r.Unknown) > 0:
		return "unknown"
	}
	return "linearizable"
}

func (r linResult) String() string {
	s := fmt.Sprintf("linearizability: %d histories, %d operations: %s", r.Histories, r.Operations, r.Verdict())
	if n := len(r.Illegal); n > 0 {
		s += fmt.Sprintf(" (%d illegal)", n)
	}
	if n := len(r.Unknown); n > 0 {
		s += fmt.Sprintf(" (%d unknown: out of time)", n)
	}
	return s
}

// checkLinearizable checks every requestId's history of ops, each within
// perHistory and all within total (the rest are unknown once it is spent),
// and writes the illegal ones' visualisation to html ("" for none).
func checkLinearizable(ops []Op, t0 time.Time, perHistory, total time.Duration, html string) linResult {
	var r linResult
	by := map[string][]porcupine.Operation{}
	for _, o := range ops {
		if p, ok := linOp(o, t0); ok {
			rid := o.RequestID
			by[rid] = append(by[rid], p)
			r.Operations++
		}
	}
	rids := make([]string, 0, len(by))
	for rid := range by {
		rids = append(rids, rid)
	}
	sort.Strings(rids)
	r.Histories = len(rids)
	model := requestModel.ToModel()
	deadline := time.Now().Add(total)
	var bad []porcupine.Operation
	for _, rid := range rids {
		left := time.Until(deadline)
		if left <= 0 {
			r.Unknown = append(r.Unknown, rid)
			continue
		}
		switch res := porcupine.CheckOperationsTimeout(model, by[rid], min(perHistory, left)); res {
		case porcupine.Illegal:
			r.Illegal = append(r.Illegal, rid)
			bad = append(bad, by[rid]...)
		case porcupine.Unknown:
			r.Unknown = append(r.Unknown, rid)
		}
	}
	if len(bad) > 0 && html != "" {
		_, info := porcupine.CheckOperationsVerbose(model, bad, perHistory)
		r.VisualiseErr = porcupine.VisualizePath(model, info, html)
		if r.VisualiseErr == nil {
			r.Visualisation = html
		}
	}
	return r
}
