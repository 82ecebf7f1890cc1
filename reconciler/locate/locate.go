// Package locate answers the on-call question "where is this request?" from
// a requestId alone: the gateway's dedup record and journal entry in Redis,
// the worker's decision in processed_requests, the order and its status
// times, the compensations owed and applied, and the trace id the gateway
// kept with the reservation. It only reads, a handful of round trips, and
// never decides anything.
package locate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"orderpipe/pkg/order"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
)

// Statuses beyond the order statuses of package order.
const (
	StatusUnknown  = "UNKNOWN"  // nothing anywhere knows the requestId
	StatusRefused  = "REFUSED"  // only the trace store knows it: the gateway refused it (4xx, 5xx), nothing changed
	StatusReleased = "RELEASED" // the gateway gave the reservation back (failed produce); no order
	StatusCreated  = "CREATED"  // decided as created, order row not readable
)

// LiveWindow: without a hint, the items of activities whose sale ended less
// than this long ago are searched for the request's Redis keys (the dedup
// record lives at least a day after the sale ends).
const LiveWindow = 24 * time.Hour

// Query is what to look for.
type Query struct {
	RequestID string
	// Item, when set, is where to look in Redis first (--activity/--item);
	// ActivityID alone narrows the search to that activity's items.
	ActivityID, ItemID int64
}

// Report is everything known about one request.
type Report struct {
	RequestID string `json:"requestId"`
	// Status is the order's (PENDING, UNPAID, PAID, CLOSED, REJECTED) or
	// RELEASED, CREATED, REFUSED or UNKNOWN; Where says it in words.
	Status     string `json:"status"`
	Where      string `json:"where"`
	Reason     string `json:"reason,omitempty"`
	OrderNo    string `json:"orderNo,omitempty"`
	ActivityID int64  `json:"activityId,omitempty"`
	ItemID     int64  `json:"itemId,omitempty"`
	UserID     int64  `json:"userId,omitempty"`
	Quantity   int    `json:"quantity,omitempty"`
	// TraceID is the trace of the order request (when it was sampled and the
	// dedup record still lives); TraceParent the gateway's server span.
	TraceID     string `json:"traceId,omitempty"`
	TraceParent string `json:"traceParent,omitempty"`
	// Spans are the trace's spans, with the traces it links, from the
	// Jaeger query service (TRACE_QUERY_URL) or else the local span store
	// (TRACE_STORE_DIR), when one is configured; SpanTree draws them.
	Spans []telemetry.StoredSpan `json:"spans,omitempty"`
	// SpansError says why the spans could not be read ("trace store
	// unreachable: …"); the rest of the report stands.
	SpansError string `json:"spansError,omitempty"`
	// GatewayAnswered is the HTTP status of the gateway's last answer to
	// the request, read from its server span when no record names the
	// trace (a refused request: 409, 429, …) and the trace store was
	// searched by the requestId and had it.
	GatewayAnswered string `json:"gatewayAnswered,omitempty"`
	// RedisError says why Redis could not be read: the report is
	// Postgres's alone (no journal, dedup record or trace id from Redis).
	RedisError string `json:"redisError,omitempty"`

	Timeline      Timeline       `json:"timeline"`
	Redis         []RedisState   `json:"redis"`
	Processed     *Processed     `json:"processed,omitempty"`
	Order         *Order         `json:"order,omitempty"`
	Compensations []Compensation `json:"compensations"`
	// Refused are reservations of this requestId refused because it was
	// first used for another reservation (a reuse for another item): each
	// orderNo reads as REJECTED IDEMPOTENCY_KEY_REUSED.
	Refused []Refused `json:"refused,omitempty"`
	// StatusEvents are the order's orders.status events still in the
	// outbox (published ones are pruned after STATUS_RETENTION), in version
	// order: PUBLISHED, or PENDING (committed, the relay has not published
	// it yet).
	StatusEvents []StatusEvent `json:"statusEvents"`
	// ItemsSearched is how many activity items' Redis keys were read.
	ItemsSearched int `json:"itemsSearched"`
}

// StatusEvent is one outbox row of orders.status.
type StatusEvent struct {
	OrderNo     string     `json:"orderNo"`
	Version     int        `json:"version"`
	Status      string     `json:"status"`
	Reason      string     `json:"reason,omitempty"`
	State       string     `json:"state"` // PUBLISHED or PENDING
	CreatedAt   time.Time  `json:"createdAt"`
	PublishedAt *time.Time `json:"publishedAt,omitempty"`
}

// Timeline is when the request went through each step (nil: not yet).
type Timeline struct {
	ReservedAt  *time.Time `json:"reservedAt,omitempty"`
	ProcessedAt *time.Time `json:"processedAt,omitempty"`
	CreatedAt   *time.Time `json:"createdAt,omitempty"`
	PaidAt      *time.Time `json:"paidAt,omitempty"`
	ClosedAt    *time.Time `json:"closedAt,omitempty"`
}

// RedisState is what one activity item's keys hold about the request.
type RedisState struct {
	ActivityID int64 `json:"activityId"`
	ItemID     int64 `json:"itemId"`
	// Bucket is the stock bucket the keys are in (bucketed stock; 0 is the
	// item's own keys).
	Bucket int `json:"bucket,omitempty"`
	// Dedup is the dedup record req:{tag}:<requestId> (nil: none).
	Dedup *Dedup `json:"dedup,omitempty"`
	// Journal is the reservation journal's entry: the reservation is not
	// decided in Postgres yet (nil: none).
	Journal json.RawMessage `json:"journal,omitempty"`
	// Fate is the claim/release guard: claimed:<orderNo> (a worker took the
	// reservation) or released:<orderNo> (given back).
	Fate string `json:"fate,omitempty"`
	// LimitHeld: the user's limit marker names this request.
	LimitHeld bool `json:"limitHeld"`
}

// Dedup is the gateway's dedup record.
type Dedup struct {
	Key         string          `json:"key"`
	OrderNo     string          `json:"orderNo"`
	Remaining   string          `json:"remaining"`
	TraceParent string          `json:"traceParent,omitempty"`
	Event       json.RawMessage `json:"event,omitempty"`
	// Published: Kafka acknowledged its event. Claimed: a worker took it.
	Published bool `json:"published"`
	Claimed   bool `json:"claimed"`
}

// Processed is the worker's decision (processed_requests).
type Processed struct {
	Outcome     string    `json:"outcome"`
	Reason      string    `json:"reason,omitempty"`
	OrderNo     string    `json:"orderNo"`
	ReservedAt  time.Time `json:"reservedAt"`
	ProcessedAt time.Time `json:"processedAt"`
}

// Order is the order row.
type Order struct {
	OrderNo   string     `json:"orderNo"`
	Status    string     `json:"status"`
	Reason    string     `json:"reason,omitempty"` // CLOSED: PAYMENT_TIMEOUT or CANCELLED
	CreatedAt time.Time  `json:"createdAt"`
	PaidAt    *time.Time `json:"paidAt,omitempty"`
	ClosedAt  *time.Time `json:"closedAt,omitempty"`
}

// Refused is a rejected_reservations row of the request.
type Refused struct {
	OrderNo    string    `json:"orderNo"`
	ActivityID int64     `json:"activityId"`
	ItemID     int64     `json:"itemId"`
	Reason     string    `json:"reason"`
	RejectedAt time.Time `json:"rejectedAt"`
}

// Compensation is an outbox row of the request.
type Compensation struct {
	OrderNo   string     `json:"orderNo"`
	Reason    string     `json:"reason"`
	Status    string     `json:"status"` // PENDING or APPLIED
	CreatedAt time.Time  `json:"createdAt"`
	AppliedAt *time.Time `json:"appliedAt,omitempty"`
	Attempts  int        `json:"attempts"`
	LastError string     `json:"lastError,omitempty"`
}

// Finder reads the request's state.
type Finder struct {
	Orders *order.Store
	Stock  *stock.Store
}

// Find gathers everything known about q.RequestID. Postgres is read first:
// its rows name the item, whose Redis keys are then read; otherwise the
// items of live activities (or of the hinted activity/item) are searched.
func (f *Finder) Find(ctx context.Context, q Query) (Report, error) {
	rep := Report{RequestID: q.RequestID, Redis: []RedisState{}, Compensations: []Compensation{}, StatusEvents: []StatusEvent{}}
	items, err := f.postgres(ctx, &rep)
	if err != nil {
		return rep, err
	}
	if err := f.statusEvents(ctx, &rep); err != nil {
		return rep, err
	}
	switch {
	case q.ActivityID > 0 && q.ItemID > 0:
		items = appendItem(items, stock.Item{ActivityID: q.ActivityID, ItemID: q.ItemID})
	case len(items) == 0:
		live, err := f.Orders.RecentItems(ctx, LiveWindow)
		if err != nil {
			return rep, err
		}
		for _, si := range live {
			if q.ActivityID == 0 || si.ActivityID == q.ActivityID {
				items = appendItem(items, stock.Item{ActivityID: si.ActivityID, ItemID: si.ItemID})
			}
		}
	}
	if err := f.redis(ctx, &rep, items); err != nil {
		// What Postgres knows still stands (an operator reads this during a
		// Redis incident); the report says what could not be read.
		rep.RedisError = err.Error()
		rep.Redis = []RedisState{}
	}
	rep.settle()
	return rep, nil
}

// statusEvents reads the outbox rows of every orderNo Postgres knows for
// the request.
func (f *Finder) statusEvents(ctx context.Context, rep *Report) error {
	var nos []string
	if rep.Order != nil {
		nos = append(nos, rep.Order.OrderNo)
	}
	if p := rep.Processed; p != nil && !slices.Contains(nos, p.OrderNo) {
		nos = append(nos, p.OrderNo)
	}
	for _, r := range rep.Refused {
		nos = append(nos, r.OrderNo)
	}
	for _, no := range nos {
		evs, err := f.Orders.EventsOf(ctx, no)
		if err != nil {
			return err
		}
		for _, e := range evs {
			st := StatusEvent{OrderNo: e.OrderNo, Version: e.Version, Status: e.Status, Reason: e.Reason, State: "PENDING",
				CreatedAt: e.CreatedAt, PublishedAt: e.PublishedAt}
			if e.PublishedAt != nil {
				st.State = "PUBLISHED"
			}
			rep.StatusEvents = append(rep.StatusEvents, st)
		}
	}
	return nil
}

func appendItem(items []stock.Item, it stock.Item) []stock.Item {
	if slices.Contains(items, it) {
		return items
	}
	return append(items, it)
}

// postgres reads the decision, the order and the compensations in one round
// trip and returns the items they name.
func (f *Finder) postgres(ctx context.Context, rep *Report) ([]stock.Item, error) {
	t, err := f.Orders.TrailOf(ctx, rep.RequestID)
	if err != nil {
		return nil, err
	}
	var items []stock.Item
	if d := t.Decision; d != nil {
		rep.Processed = &Processed{Outcome: d.Outcome, Reason: d.Reason, OrderNo: d.OrderNo, ReservedAt: d.ReservedAt, ProcessedAt: d.ProcessedAt}
		rep.UserID, rep.Quantity, rep.ActivityID, rep.ItemID = d.UserID, d.Quantity, d.ActivityID, d.ItemID
		items = appendItem(items, stock.Item{ActivityID: d.ActivityID, ItemID: d.ItemID})
	}
	if o := t.Order; o != nil {
		rep.Order = &Order{OrderNo: o.OrderNo, Status: o.Status, Reason: o.Reason, CreatedAt: o.CreatedAt, PaidAt: o.PaidAt, ClosedAt: o.ClosedAt}
		rep.UserID, rep.Quantity, rep.ActivityID, rep.ItemID = o.UserID, o.Quantity, o.ActivityID, o.ItemID
		items = appendItem(items, stock.Item{ActivityID: o.ActivityID, ItemID: o.ItemID})
	}
	for _, c := range t.Compensations {
		status := "PENDING"
		if c.AppliedAt != nil {
			status = "APPLIED"
		}
		rep.Compensations = append(rep.Compensations, Compensation{OrderNo: c.OrderNo, Reason: c.Reason, Status: status,
			CreatedAt: c.CreatedAt, AppliedAt: c.AppliedAt, Attempts: c.Attempts, LastError: c.LastError})
		items = appendItem(items, stock.Item{ActivityID: c.ActivityID, ItemID: c.ItemID})
	}
	for _, r := range t.Refused {
		rep.Refused = append(rep.Refused, Refused(r))
		items = appendItem(items, stock.Item{ActivityID: r.ActivityID, ItemID: r.ItemID})
	}
	return items, nil
}

// redis reads the request's keys on every candidate item in one pipeline,
// then the user's limit marker where something was found.
func (f *Finder) redis(ctx context.Context, rep *Report, items []stock.Item) error {
	rep.ItemsSearched = len(items)
	if len(items) == 0 {
		return nil
	}
	items, err := f.withBuckets(ctx, items)
	if err != nil {
		return err
	}
	rid := rep.RequestID
	found, err := f.Stock.Traces(ctx, items, rid)
	if err != nil {
		return err
	}
	for _, tr := range found {
		it := tr.Item
		st := RedisState{ActivityID: it.ActivityID, ItemID: it.ItemID, Bucket: it.Bucket}
		if d := tr.Dedup; d != nil {
			st.Dedup = &Dedup{Key: d.Key, OrderNo: d.OrderNo, Remaining: d.Remaining,
				TraceParent: d.TraceParent, Event: rawJSON(d.Event), Published: d.Published, Claimed: d.Claimed}
		}
		if tr.Journaled {
			st.Journal = rawJSON(tr.Journal)
		}
		// The release guard is keyed by the reservation's orderNo.
		orderNo := ""
		if st.Dedup != nil {
			orderNo = st.Dedup.OrderNo
		} else if ev, ok := st.event(); ok {
			orderNo = ev.OrderNo
		}
		if orderNo != "" {
			fate, err := f.Stock.Fate(ctx, it, orderNo)
			if err != nil {
				return err
			}
			st.Fate = fate
		}
		if st.Dedup == nil && st.Journal == nil && st.Fate == "" {
			continue
		}
		rep.Redis = append(rep.Redis, st)
	}
	for i := range rep.Redis {
		st := &rep.Redis[i]
		ev, ok := st.event()
		if !ok {
			continue
		}
		if rep.UserID == 0 {
			rep.UserID, rep.Quantity = ev.UserID, ev.Quantity
		}
		if rep.ActivityID == 0 {
			rep.ActivityID, rep.ItemID = st.ActivityID, st.ItemID
		}
		owner, err := f.Stock.MarkerOwner(ctx, stock.Item{ActivityID: st.ActivityID, ItemID: st.ItemID, Bucket: st.Bucket}, ev.UserID)
		if err != nil {
			return err
		}
		st.LimitHeld = owner == rid
	}
	return nil
}

// journaled is the event fields a report reads.
type journaled struct {
	OrderNo    string    `json:"orderNo"`
	UserID     int64     `json:"userId"`
	Quantity   int       `json:"quantity"`
	ReservedAt time.Time `json:"reservedAt"`
}

func (st RedisState) event() (journaled, bool) {
	var ev journaled
	raw := st.Journal
	if raw == nil && st.Dedup != nil {
		raw = st.Dedup.Event
	}
	if raw == nil || json.Unmarshal(raw, &ev) != nil || ev.UserID == 0 {
		return journaled{}, false
	}
	return ev, true
}

func rawJSON(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	if !json.Valid([]byte(s)) {
		b, _ := json.Marshal(s) // shown as a string
		return b
	}
	return json.RawMessage(s)
}

// settle derives the status, the order number, the timeline and the trace.
func (r *Report) settle() {
	st := r.redisOfItem()
	r.settleIdentity(st)
	r.settleStatus(st)
	r.settleCaveats()
}

// redisOfItem is the Redis state of the report's item (the first found when
// no record named the item yet); nil when Redis holds none.
func (r *Report) redisOfItem() *RedisState {
	for i := range r.Redis {
		if r.ActivityID == 0 || (r.Redis[i].ActivityID == r.ActivityID && r.Redis[i].ItemID == r.ItemID) {
			return &r.Redis[i]
		}
	}
	return nil
}

// settleIdentity sets the order number, the trace and the timeline, each
// from the most decided record that has it: Redis, then the worker's
// decision, then the order row.
func (r *Report) settleIdentity(st *RedisState) {
	if st != nil {
		if st.Dedup != nil {
			r.OrderNo = st.Dedup.OrderNo
			r.TraceParent = st.Dedup.TraceParent
		}
		if ev, ok := st.event(); ok {
			r.OrderNo = cmpOr(r.OrderNo, ev.OrderNo)
			t := ev.ReservedAt
			r.Timeline.ReservedAt = &t
		}
	}
	if sc, ok := telemetry.ParseTraceParent(r.TraceParent); ok {
		r.TraceID = sc.TraceID().String()
	}
	if p := r.Processed; p != nil {
		r.OrderNo = p.OrderNo
		t, pt := p.ReservedAt, p.ProcessedAt
		r.Timeline.ReservedAt, r.Timeline.ProcessedAt = &t, &pt
	}
	if o := r.Order; o != nil {
		r.OrderNo = o.OrderNo
		t := o.CreatedAt
		r.Timeline.CreatedAt, r.Timeline.PaidAt, r.Timeline.ClosedAt = &t, o.PaidAt, o.ClosedAt
	}
}

// settleStatus says where the request is, from the furthest stage that
// holds it: the order row, the worker's decision, Redis, nothing.
func (r *Report) settleStatus(st *RedisState) {
	switch {
	case r.Order != nil:
		r.settleOrder()
	case r.Processed != nil && r.Processed.Outcome == string(order.Rejected):
		r.Status, r.Reason = order.StatusRejected, r.Processed.Reason
		r.Where = "rejected by Postgres (" + r.Reason + "); no order, its units were given back"
	case r.Processed != nil:
		r.Status = StatusCreated
		r.Where = "decided as created, but no order row was found"
	case st != nil && st.Journal != nil:
		r.Status = order.StatusPending
		r.Where = journaledWhere(st)
	case st != nil && strings.HasPrefix(st.Fate, "released:"):
		r.Status = StatusReleased
		r.Where = "the reservation was given back without an order (a failed produce the client got 503 for, or a dead-lettered event)"
	case st != nil:
		r.Status = order.StatusPending
		r.Where = "known to Redis only (dedup record without journal entry or decision)"
	case r.RedisError != "":
		r.Status = StatusUnknown
		r.Where = "not in Postgres; Redis could not be read, and a reservation not persisted yet would only be there"
	default:
		r.Status = StatusUnknown
		r.Where = "no trace of this requestId in Postgres or in the Redis keys of the items searched"
	}
}

// settleOrder: the request is an order; its status is the row's.
func (r *Report) settleOrder() {
	r.Status = r.Order.Status
	switch r.Status {
	case order.StatusUnpaid:
		r.Where = "order persisted by the worker, waiting for payment"
	case order.StatusPaid:
		r.Where = "order paid (final)"
	case order.StatusClosed:
		r.Reason = r.Order.Reason
		r.Where = "order closed unpaid by the closer; its units were given back"
		if r.Reason == order.ReasonCancelled {
			r.Where = "order cancelled by the buyer; its units were given back"
		}
	}
}

// journaledWhere is where a reservation with a journal entry but no
// decision is: claimed by a worker, or still on its way to one.
func journaledWhere(st *RedisState) string {
	switch {
	case strings.HasPrefix(st.Fate, "claimed:"):
		return "reserved in Redis and claimed by a worker: its Postgres decision is in flight"
	case st.Dedup != nil && st.Dedup.Published:
		return "reserved in Redis (journal entry); its event is in Kafka (acknowledged), no worker has claimed it yet " +
			"(the redrive re-publishes it after REDRIVE_AFTER)"
	default:
		return "reserved in Redis (journal entry); its event is being produced, or Kafka has not acknowledged it, " +
			"and no worker has claimed it yet (the redrive re-publishes it after REDRIVE_AFTER)"
	}
}

// settleCaveats adds what the status does not say: compensations still to
// apply, and a Redis that could not be read.
func (r *Report) settleCaveats() {
	pending := 0
	for _, c := range r.Compensations {
		if c.AppliedAt == nil {
			pending++
		}
	}
	if pending > 0 {
		r.Where += fmt.Sprintf("; %d compensation(s) still to apply in Redis", pending)
	}
	if r.RedisError != "" && r.Status != StatusUnknown {
		r.Where += "; Redis could not be read: its journal entry, dedup record and the trace id are not shown"
	}
}

// Answered records the gateway's answer to a request no record names,
// found in the trace store by the requestId (telemetry.GatewayAnswer).
func (r *Report) Answered(traceID, status string) {
	r.TraceID, r.GatewayAnswered = traceID, status
	if r.Status == StatusUnknown && r.RedisError == "" && status != "" && !strings.HasPrefix(status, "2") {
		r.Status = StatusRefused
		r.Where = "nothing reserved or decided: the gateway refused it, HTTP " + status + " (a refusal changes nothing); see its trace"
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Text renders the report as a block for a terminal: what the request is,
// then what each store holds of it.
func (r Report) Text() string {
	var b block
	r.textSummary(&b)
	r.textPostgres(&b)
	r.textRedis(&b)
	r.textStatusEvents(&b)
	r.textCompensations(&b)
	return b.String()
}

// block is a report's text: one labelled line after another.
type block struct{ strings.Builder }

func (b *block) line(label, format string, args ...any) {
	fmt.Fprintf(b, "%-13s %s\n", label, fmt.Sprintf(format, args...))
}

// firstOf labels the first line of a list; the others sit under it.
func firstOf(i int, label string) string {
	if i == 0 {
		return label
	}
	return ""
}

// stamp is a time as the report shows it ("-" when not reached).
func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// textSummary: the request, its status, its order, its trace, its timeline.
func (r Report) textSummary(b *block) {
	b.line("request", "%s", r.RequestID)
	status := r.Status
	if r.Reason != "" {
		status += " (" + r.Reason + ")"
	}
	b.line("status", "%s: %s", status, r.Where)
	if r.OrderNo != "" {
		b.line("order", "%s  activity %d item %d  user %d  quantity %d", r.OrderNo, r.ActivityID, r.ItemID, r.UserID, r.Quantity)
	}
	switch {
	case r.TraceID != "" && r.TraceParent == "":
		b.line("trace", "%s  (found by the requestId in the trace store)", r.TraceID)
	case r.TraceID != "":
		b.line("trace", "%s  (traceparent %s)", r.TraceID, r.TraceParent)
	case r.Status != StatusUnknown:
		b.line("trace", "unknown (not sampled, or the dedup record has expired)")
	}
	if r.RedisError != "" {
		b.line("redis", "could not be read: %s", r.RedisError)
	}
	if r.Status != StatusUnknown && r.Status != StatusRefused {
		b.line("timeline", "reserved %s  processed %s  created %s  paid %s  closed %s", stamp(r.Timeline.ReservedAt),
			stamp(r.Timeline.ProcessedAt), stamp(r.Timeline.CreatedAt), stamp(r.Timeline.PaidAt), stamp(r.Timeline.ClosedAt))
	}
}

// textPostgres: the worker's decision, the order row, the refused
// reservations.
func (r Report) textPostgres(b *block) {
	if p := r.Processed; p != nil {
		reason := ""
		if p.Reason != "" {
			reason = " " + p.Reason
		}
		b.line("postgres", "processed_requests: %s%s at %s", p.Outcome, reason, stamp(&p.ProcessedAt))
	} else {
		b.line("postgres", "processed_requests: none (not decided by a worker)")
	}
	if o := r.Order; o != nil {
		b.line("", "orders: %s %s", o.OrderNo, o.Status)
	}
	for _, rf := range r.Refused {
		b.line("", "rejected_reservations: %s (item %d:%d) REJECTED %s at %s", rf.OrderNo, rf.ActivityID, rf.ItemID, rf.Reason, stamp(&rf.RejectedAt))
	}
}

// textRedis: per item, the dedup record, the journal entry, the fate and
// the limit marker.
func (r Report) textRedis(b *block) {
	if len(r.Redis) == 0 && r.RedisError == "" {
		b.line("redis", "nothing (searched %d item(s))", r.ItemsSearched)
	}
	for i, st := range r.Redis {
		b.line(firstOf(i, "redis"), "item %d:%d", st.ActivityID, st.ItemID)
		if st.Dedup != nil {
			b.line("", "  dedup record %s: orderNo %s, remaining %s, event in Kafka: %s, claimed by a worker: %s", st.Dedup.Key,
				st.Dedup.OrderNo, st.Dedup.Remaining, yesNo(st.Dedup.Published), yesNo(st.Dedup.Claimed))
		} else {
			b.line("", "  dedup record: none")
		}
		if st.Journal != nil {
			b.line("", "  journal entry: present (not yet decided in Postgres)")
		} else {
			b.line("", "  journal entry: none")
		}
		b.line("", "  fate: %s  limit marker held: %s", cmpOr(st.Fate, "-"), strconv.FormatBool(st.LimitHeld))
	}
}

// textStatusEvents: the order's orders.status outbox rows.
func (r Report) textStatusEvents(b *block) {
	if len(r.StatusEvents) == 0 && r.Status != StatusUnknown {
		b.line("orders.status", "no event in the outbox (none yet, or pruned after STATUS_RETENTION)")
	}
	for i, e := range r.StatusEvents {
		detail := fmt.Sprintf("v%d %s", e.Version, e.Status)
		if e.Reason != "" {
			detail += " " + e.Reason
		}
		detail += fmt.Sprintf(" of %s: %s, written %s", e.OrderNo, e.State, stamp(&e.CreatedAt))
		if e.PublishedAt != nil {
			detail += ", published " + stamp(e.PublishedAt)
		}
		b.line(firstOf(i, "orders.status"), "%s", detail)
	}
}

// textCompensations: the compensations written for the request's order.
func (r Report) textCompensations(b *block) {
	if len(r.Compensations) == 0 {
		b.line("compensation", "none")
	}
	for i, c := range r.Compensations {
		detail := fmt.Sprintf("%s %s for %s, written %s", c.Status, c.Reason, c.OrderNo, stamp(&c.CreatedAt))
		if c.AppliedAt != nil {
			detail += ", applied " + stamp(c.AppliedAt)
		} else if c.Attempts > 0 {
			detail += fmt.Sprintf(", %d failed attempt(s): %s", c.Attempts, c.LastError)
		}
		b.line(firstOf(i, "compensation"), "%s", detail)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
