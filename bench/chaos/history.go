package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// The history is every operation the nemesis's clients performed, as they
// saw it: when it was sent and when its answer came (or the client gave up
// waiting), to which gateway, with what payload, and what it was told. The
// checker judges the run from it and from the stores; it is written to the
// run's folder as JSON lines so a failure can be read op by op.

// Op kinds.
const (
	opOrder  = "order"   // POST /v1/orders
	opPay    = "pay"     // POST /v1/orders/{orderNo}/pay
	opGet    = "get"     // GET /v1/orders/{orderNo}
	opCancel = "cancel"  // POST /v1/orders/{orderNo}/cancel
	opGiveUp = "give-up" // the client stops retrying the request (no HTTP call)
)

// Op is one operation of the history.
type Op struct {
	Seq       int        `json:"seq"`
	Client    int        `json:"client"`
	Kind      string     `json:"kind"`
	RequestID string     `json:"requestId"`
	Attempt   int        `json:"attempt,omitempty"` // of the requestId's POSTs, from 1
	Gateway   int        `json:"gateway"`
	Start     time.Time  `json:"start"`
	End       time.Time  `json:"end"`
	TimeoutMs int64      `json:"timeoutMs,omitempty"` // the client's timeout for this call
	Payload   *orderBody `json:"payload,omitempty"`
	// Status is the HTTP status, 0 when no answer came (Err says why:
	// the client's timeout, or a transport error).
	Status      int    `json:"status"`
	Code        string `json:"code,omitempty"`
	OrderNo     string `json:"orderNo,omitempty"` // answered (order), or asked about (pay, get)
	Replayed    bool   `json:"replayed,omitempty"`
	OrderStatus string `json:"orderStatus,omitempty"` // the order's status in the answer
	Reason      string `json:"reason,omitempty"`      // GET and cancel: why it is CLOSED or REJECTED
	RetryAfter  int    `json:"retryAfterS,omitempty"`
	Err         string `json:"err,omitempty"`
	Note        string `json:"note,omitempty"`
	// Unknown: the answer says its outcome is unknown (a 503 whose body says
	// so, another 5xx, or a body that is not the API's): it may still end
	// as an order. Any other refusal says nothing was reserved.
	Unknown bool `json:"unknown,omitempty"`
}

// ok2xx reports whether the op was answered 200 or 202.
func (o Op) ok2xx() bool { return o.Status == 200 || o.Status == 202 }

// retriable: the client does not know the outcome, or was told to retry.
func (o Op) retriable() bool {
	return o.Status == 0 || o.Status == 429 || o.Status >= 500 || o.Code == "ORDER_PENDING" || o.Code == "IDEMPOTENCY_KEY_IN_PROGRESS"
}

func (o Op) answer() string {
	switch {
	case o.Kind == opGiveUp:
		return "gave up"
	case o.Status == 0:
		return "no answer: " + o.Err
	}
	a := fmt.Sprint(o.Status)
	for _, s := range []string{o.Code, o.OrderStatus, o.Reason, o.OrderNo} {
		if s != "" {
			a += " " + s
		}
	}
	if o.Replayed {
		a += " replayed"
	}
	return a
}

// line is the op for a failure report; t0 is the load's start.
func (o Op) line(t0 time.Time) string {
	dur := ""
	if !o.End.IsZero() {
		dur = fmt.Sprintf("–%+.3fs", o.End.Sub(t0).Seconds())
	}
	timeout := ""
	if o.TimeoutMs > 0 {
		timeout = fmt.Sprintf(" timeout %dms", o.TimeoutMs)
	}
	what := o.Kind
	if o.Kind == opOrder {
		what = fmt.Sprintf("order #%d", o.Attempt)
	}
	note := ""
	if o.Note != "" {
		note = " (" + o.Note + ")"
	}
	return fmt.Sprintf("%+.3fs%s c%d gw%d %s%s → %s%s", o.Start.Sub(t0).Seconds(), dur, o.Client, o.Gateway+1, what, timeout, o.answer(), note)
}

// history is the ops of one nemesis run, kept in memory.
type history struct {
	mu  sync.Mutex
	t0  time.Time
	ops []Op
}

func newHistory(t0 time.Time) *history { return &history{t0: t0} }

// add records a finished op.
func (h *history) add(o Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.Seq = len(h.ops)
	h.ops = append(h.ops, o)
}

// snapshot is every op so far, in the order they started.
func (h *history) snapshot() []Op {
	h.mu.Lock()
	ops := append([]Op(nil), h.ops...)
	h.mu.Unlock()
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Start.Before(ops[j].Start) })
	return ops
}

// byRequest groups the ops by requestId, each in the order they started.
func byRequest(ops []Op) map[string][]Op {
	out := map[string][]Op{}
	for _, o := range ops {
		out[o.RequestID] = append(out[o.RequestID], o)
	}
	return out
}

// write saves the history as JSON lines.
func (h *history) write(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, o := range h.snapshot() {
		if err := enc.Encode(o); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// requestOps is the ops of one requestId, one per line, for a report.
func requestOps(t0 time.Time, ops []Op) string {
	var b strings.Builder
	for _, o := range ops {
		b.WriteString("      " + o.line(t0) + "\n")
	}
	return b.String()
}
