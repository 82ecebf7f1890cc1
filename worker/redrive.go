package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/clock"
	"orderpipe/pkg/event"
	"orderpipe/pkg/lock"
	"orderpipe/pkg/order"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/tick"
)

// The redrive closes the gap between the reserve script and the produce: a
// gateway that dies in between leaves a journal entry whose event never
// reached Kafka. Entries older than After that no worker has decided are
// published again (the worker is idempotent, so a duplicate is harmless);
// entries of created orders are acknowledged (a worker died before its ack).
// Entries whose request was rejected are left to their compensation, which
// the sweep applies and which drops the entry.

// RedriveLockName keeps the redrive to one replica at a time.
const RedriveLockName = "{redrive}"

// HeaderRedriven marks a re-published event.
const HeaderRedriven = "redriven"

// RedriveConfig is the redrive's configuration.
type RedriveConfig struct {
	// After is how old a journal entry must be before it is re-published
	// (REDRIVE_AFTER); Interval how often the journals are scanned
	// (REDRIVE_INTERVAL).
	After    time.Duration
	Interval time.Duration
	// EndedWithin: items of activities whose sale ended longer ago are not
	// scanned.
	EndedWithin time.Duration
	// LockTTL is the singleton lock's lifetime (renewed while a pass runs).
	LockTTL time.Duration
	// MaxBackoff caps how long an entry republished before waits for its
	// next republish (doubling from After), so a worker that is down does
	// not get the same event every Interval.
	MaxBackoff time.Duration
	// Topic is the topic Events writes to (names the send spans).
	Topic string
}

func (c *RedriveConfig) defaults() {
	setting.DefaultTo(&c.After, redriveAfterVar.Duration())
	setting.DefaultTo(&c.Interval, redriveIntervalVar.Duration())
	setting.DefaultTo(&c.EndedWithin, 24*time.Hour)
	setting.DefaultTo(&c.LockTTL, 15*time.Second)
	setting.DefaultTo(&c.MaxBackoff, 5*time.Minute)
	if c.Topic == "" {
		c.Topic = event.Topic
	}
}

// RedriveDeps are the redrive's collaborators.
type RedriveDeps struct {
	Orders *order.Store
	Stock  *stock.Store
	// Events produces to the orders topic.
	Events  Producer
	Locker  *lock.Locker
	Metrics *telemetry.Metrics
	Log     *slog.Logger
	// NowFunc is the wall clock compared with a journal entry's reservedAt,
	// the gateway's (nil: clock.Now).
	NowFunc func() time.Time
	// TickFunc measures this process's own intervals: how long an entry
	// has been in the journal, the backoff between republishes (nil:
	// time.Now, whose monotonic reading no wall-clock step moves).
	TickFunc func() time.Time
	// Offsets reads the orders topic's partitions and the workers' group
	// position (GroupOffsets). An entry is republished only once the group
	// has consumed every partition past where it ended at the start of a
	// pass that found the entry already After old and seen by an earlier
	// pass: its gateway's produce, if any, had ended by then, so its event
	// is behind that end. Before that, its event may still be waiting in a
	// backlog, and republishing it would only add a copy behind it (under a
	// backlog of minutes, a copy of nearly every entry). An end read before
	// the entry was seen proves nothing: the produce may land after it.
	// Nil: not consulted.
	Offsets func(ctx context.Context) (map[int]PartitionOffsets, error)
}

// Redriver re-publishes stranded reservations.
type Redriver struct {
	cfg  RedriveConfig
	deps RedriveDeps
	// sent remembers this process's republishes, by requestId and orderNo,
	// to back off; only the pass holding the lock touches it.
	sent map[stock.Ref]resent
	// first is when this process first saw each journal entry (TickFunc):
	// an entry is stranded once it is After old by the gateway's stamp or
	// by this observation, so a gateway clock ahead of the worker's (a
	// reservedAt in the future) delays its redrive by After at most.
	first map[stock.Ref]firstSeen
	// pos and end are this pass's reading of Offsets: the group's position
	// and where each partition ends (nil: not read, or it failed), read
	// after the pass's start, passNow and passTick (NowFunc, TickFunc).
	pos               map[int]PartitionOffsets
	end               map[int]int64
	passNow, passTick time.Time
}

// firstSeen is when this process first saw a journal entry, and where the
// orders topic ended once the entry was old (nil: not known yet; see
// RedriveDeps.Offsets).
type firstSeen struct {
	at  time.Time
	end map[int]int64
}

type resent struct {
	times int
	next  time.Time
}

// NewRedriver builds a redriver.
func NewRedriver(cfg RedriveConfig, deps RedriveDeps) *Redriver {
	cfg.defaults()
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.NowFunc == nil {
		deps.NowFunc = clock.Now
	}
	if deps.TickFunc == nil {
		deps.TickFunc = time.Now
	}
	return &Redriver{cfg: cfg, deps: deps, sent: map[stock.Ref]resent{}, first: map[stock.Ref]firstSeen{}}
}

// RedriveResult counts one pass.
type RedriveResult struct {
	Items       int // items whose journal was read
	Entries     int // journal entries seen (each once, though HSCAN may bring one twice)
	Republished int
	Acked       int
	Rejected    int // decided as rejected, awaiting their compensation
	Unreadable  int
	Behind      int  // stranded by age, but the group has not consumed past them yet
	Skipped     bool // another replica holds the lock
}

// Run scans every Interval until ctx ends; only the replica holding the lock
// does the pass.
func (r *Redriver) Run(ctx context.Context) error {
	tick.Every(ctx, r.cfg.Interval, func() { r.pass(ctx) })
	return nil
}

// pass is runOnce under the lock, counted and logged; a replica that does
// not get the lock skips it.
func (r *Redriver) pass(ctx context.Context) {
	var res RedriveResult
	err := r.deps.Locker.Do(ctx, RedriveLockName, r.cfg.LockTTL, func(ctx context.Context, _ *lock.Lock) error {
		var err error
		res, err = r.runOnce(ctx)
		return err
	}, lock.WithMaxAttempts(1))
	switch {
	case ctx.Err() != nil:
	case errors.Is(err, lock.ErrNotAcquired):
		r.deps.Metrics.RedrivePasses.WithLabelValues("skipped").Inc()
	case err != nil:
		r.deps.Metrics.RedrivePasses.WithLabelValues("error").Inc()
		r.deps.Log.Warn("redrive pass failed", "err", err)
	default:
		r.deps.Metrics.RedrivePasses.WithLabelValues("ok").Inc()
	}
	switch {
	case errors.Is(err, lock.ErrNotAcquired), ctx.Err() != nil:
	case err != nil:
	case res.Republished+res.Acked > 0:
		r.deps.Log.Info("redrive pass", "republished", res.Republished, "acked", res.Acked,
			"rejected_waiting", res.Rejected, "behind_the_group", res.Behind, "entries", res.Entries)
	}
}

// runOnce is one pass over the journals of every recent item.
func (r *Redriver) runOnce(ctx context.Context) (RedriveResult, error) {
	var res RedriveResult
	items, err := r.deps.Orders.RecentItems(ctx, r.cfg.EndedWithin)
	if err != nil {
		return res, err
	}
	seen := map[stock.Ref]bool{}
	var errs []error
	r.pos, r.end = nil, nil
	r.passNow, r.passTick = r.deps.NowFunc(), r.deps.TickFunc()
	if r.deps.Offsets != nil {
		pos, err := r.deps.Offsets(ctx)
		if err != nil {
			// Nothing is republished this pass: where the group stands is
			// not known. Decided entries are still acknowledged.
			errs = append(errs, fmt.Errorf("reading the orders topic's offsets: %w", err))
		} else {
			r.pos, r.end = pos, make(map[int]int64, len(pos))
			for p, o := range pos {
				r.end[p] = o.HighWatermark
			}
		}
	}
	for _, si := range items {
		for b := range max(si.Buckets, 1) { // each bucket has its journal
			it := stock.Item{ActivityID: si.ActivityID, ItemID: si.ItemID, Bucket: b}
			if err := r.item(ctx, it, &res, seen); err != nil {
				errs = append(errs, fmt.Errorf("redriving %s: %w", it, err))
			}
		}
	}
	for ref := range r.sent {
		if !seen[ref] {
			delete(r.sent, ref)
		}
	}
	for ref := range r.first {
		if !seen[ref] {
			delete(r.first, ref)
		}
	}
	return res, errors.Join(errs...)
}

type journaled struct {
	ev  event.OrderRequested
	raw string
}

// item redrives the journal of one item (one bucket of it).
func (r *Redriver) item(ctx context.Context, it stock.Item, res *RedriveResult, seen map[stock.Ref]bool) error {
	// A page at a time: under a long backlog the journal holds hundreds of
	// thousands of entries, and the pass keeps only what it decides on.
	// An entry HSCAN brings twice is acked twice (a no-op) or skipped the
	// second time (just sent: r.sent).
	counted := false
	return r.deps.Stock.JournalPages(ctx, it, func(entries map[string]string) error {
		if !counted {
			res.Items++
			counted = true
		}
		return r.page(ctx, it, entries, res, seen)
	})
}

// page is item's work on one page of the journal: the entries old enough,
// acked when decided, re-published when not.
func (r *Redriver) page(ctx context.Context, it stock.Item, entries map[string]string, res *RedriveResult, seen map[stock.Ref]bool) error {
	tick := r.deps.TickFunc()
	old, ids := r.oldEntries(it, entries, res, seen, r.deps.NowFunc(), tick)
	if len(old) == 0 {
		return nil
	}
	processed, err := r.deps.Orders.ProcessedAmong(ctx, ids)
	if err != nil {
		return err
	}
	var acks, refs []stock.Ref
	var msgs []kafka.Message
	for _, j := range old {
		ref := stock.Ref{RequestID: j.ev.RequestID, OrderNo: j.ev.OrderNo}
		p, decided := processed[ref.RequestID]
		switch {
		case decided && p.OrderNo == ref.OrderNo && p.Outcome == order.Created:
			acks = append(acks, ref)
		case decided && p.OrderNo == ref.OrderNo:
			res.Rejected++
		default:
			// Not decided, or the requestId was decided for another
			// reservation: the worker rejects this one and gives it back.
			if s, ok := r.sent[ref]; ok && tick.Before(s.next) {
				continue
			}
			if !r.consumedPast(ref) {
				res.Behind++
				continue
			}
			msgs = append(msgs, redriven(j))
			refs = append(refs, ref)
		}
	}
	if len(acks) > 0 {
		n, err := r.deps.Stock.Ack(ctx, it, acks)
		if err != nil {
			return err
		}
		res.Acked += int(n)
		r.deps.Metrics.RedriveAcked.Add(float64(n))
	}
	if len(msgs) == 0 {
		return nil
	}
	return r.republish(ctx, it, msgs, refs, res, tick)
}

// oldEntries are the page's entries REDRIVE_AFTER old, by their stamp or
// by how long the redrive has seen them, with their requestIds; an
// unreadable entry is counted (once) and logged.
func (r *Redriver) oldEntries(it stock.Item, entries map[string]string, res *RedriveResult, seen map[stock.Ref]bool, now, tick time.Time) (old []journaled, ids []string) {
	for rid, raw := range entries {
		var ev event.OrderRequested
		if err := json.Unmarshal([]byte(raw), &ev); err != nil || ev.OrderNo == "" || ev.ReservedAt.IsZero() {
			// Counted once, though HSCAN may bring it twice.
			if bad := (stock.Ref{RequestID: rid}); !seen[bad] {
				seen[bad] = true
				res.Entries++
				res.Unreadable++
				r.deps.Log.Warn("unreadable journal entry", "item", it.String(), "request_id", rid)
			}
			continue
		}
		ev.RequestID = rid // the journal's key is what the scripts go by
		ref := stock.Ref{RequestID: rid, OrderNo: ev.OrderNo}
		if !seen[ref] {
			res.Entries++
		}
		seen[ref] = true
		first, ok := r.first[ref]
		if !ok {
			first.at = tick
			r.first[ref] = first
		}
		if now.Sub(ev.ReservedAt) < r.cfg.After && tick.Sub(first.at) < r.cfg.After {
			continue
		}
		if first.end == nil && first.at.Before(r.passTick) &&
			(r.passNow.Sub(ev.ReservedAt) >= r.cfg.After || r.passTick.Sub(first.at) >= r.cfg.After) {
			first.end = r.end // shared by every entry it applies to in this pass
			r.first[ref] = first
		}
		old = append(old, journaled{ev: ev, raw: raw})
		ids = append(ids, rid)
	}
	return old, ids
}

// republish sends the stranded reservations' events again, marks them
// published and backs each off before its next send.
func (r *Redriver) republish(ctx context.Context, it stock.Item, msgs []kafka.Message, refs []stock.Ref, res *RedriveResult, tick time.Time) error {
	// With REDIS_WAIT_REPLICAS only entries a failover keeps are
	// published: an entry on the primary alone (a reserve whose WAIT has
	// not answered, seen early through a gateway clock running behind)
	// would become an order from its event after a failover that lost it,
	// while its gateway answers 503 and the client's retry reserves a
	// second orderNo.
	if err := r.deps.Stock.AwaitReplicas(ctx); err != nil {
		return fmt.Errorf("before re-publishing %d events: %w", len(msgs), err)
	}
	ctxs, spans := r.startSends(ctx, it, refs, msgs)
	err := r.deps.Events.WriteMessages(ctx, msgs...)
	for _, span := range spans {
		event.EndSend(span, err)
	}
	if err != nil {
		return fmt.Errorf("re-publishing %d events: %w", len(msgs), err)
	}
	res.Republished += len(msgs)
	r.deps.Metrics.Redriven.Add(float64(len(msgs)))
	// Kafka has them now: their requests' retries may be shown the orderNo.
	if _, err := r.deps.Stock.MarkPublished(ctx, it, refs); err != nil {
		r.deps.Log.Warn("marking re-published reservations published failed", "item", it.String(), "err", err)
	}
	for i, ref := range refs {
		s := r.sent[ref]
		s.times++
		s.next = tick.Add(min(r.cfg.After<<min(s.times-1, 16), r.cfg.MaxBackoff))
		r.sent[ref] = s
		r.deps.Log.InfoContext(ctxs[i], "re-published stranded reservation", "request_id", ref.RequestID, "order_no", ref.OrderNo,
			"item", it.String(), "times", s.times)
	}
	return nil
}

// startSends starts the send span of each re-published event in the trace
// of its order (kept by the gateway in the dedup record, when sampled), so
// the worker's process span lands in that trace too; a redrive pass itself
// leaves no trace.
func (r *Redriver) startSends(ctx context.Context, it stock.Item, refs []stock.Ref, msgs []kafka.Message) ([]context.Context, []trace.Span) {
	ctxs := make([]context.Context, len(msgs))
	spans := make([]trace.Span, len(msgs))
	for i, ref := range refs {
		mctx := telemetry.WithOrder(ctx, ref.RequestID, ref.OrderNo)
		if tp, err := r.deps.Stock.TraceParent(ctx, it, ref.RequestID); err == nil {
			if sc, ok := telemetry.ParseTraceParent(tp); ok {
				mctx = trace.ContextWithRemoteSpanContext(mctx, sc)
			}
		}
		ctxs[i], spans[i] = event.StartSend(mctx, r.cfg.Topic, &msgs[i])
		if spans[i].IsRecording() {
			spans[i].SetAttributes(telemetry.OrderAttrs(ref.RequestID, ref.OrderNo)...)
			spans[i].SetAttributes(attribute.Bool("orderpipe.redriven", true))
		}
	}
	return ctxs, spans
}

// consumedPast says whether the group has consumed every partition of the
// orders topic past where it ended when ref was first seen: its event, if
// a gateway produced it, is then behind the group. Always true without
// Offsets; false while the position or that end is not known.
func (r *Redriver) consumedPast(ref stock.Ref) bool {
	if r.deps.Offsets == nil {
		return true
	}
	end := r.first[ref].end
	if r.pos == nil || end == nil {
		return false
	}
	for p, e := range end {
		if o, ok := r.pos[p]; !ok || o.Consumed() < e {
			return false
		}
	}
	return true
}

// redriven is the journaled event as the gateway would have produced it
// (signed: the journal is the gateway's), marked as re-published.
func redriven(j journaled) kafka.Message {
	msg := event.MessageOf(j.ev, []byte(j.raw))
	msg.Headers = append(msg.Headers, kafka.Header{Key: HeaderRedriven, Value: []byte("1")})
	return msg
}
