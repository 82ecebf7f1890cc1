// Package worker consumes orders.requested in a consumer group and persists
// reservations in Postgres, one transaction per batch, committing Kafka
// offsets only after the transaction commits. Afterwards it acknowledges the
// journal entries of created orders and applies the compensations Postgres
// decided. It never answers clients and never decides stock in Redis alone.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/breaker"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/outbox"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/telemetry"
	"orderpipe/pkg/tick"
)

// Config is the worker's configuration.
type Config struct {
	Brokers  []string
	Topic    string // orders.requested
	DLQTopic string // orders.requested.dlq
	GroupID  string
	// BatchSize caps a batch; BatchWait is how long a started batch waits
	// for more messages.
	BatchSize int
	BatchWait time.Duration
	// SweepInterval is how often pending compensations older than
	// SweepAfter are retried (a worker that died after its commit left them).
	SweepInterval time.Duration
	SweepAfter    time.Duration
	// BreakerOpenFor is how long the Postgres breaker stays open once tripped.
	BreakerOpenFor time.Duration
	// LagInterval is how often the group's consumer lag is read from the
	// broker for the lag gauge.
	LagInterval time.Duration
	// Security is TLS and SASL for the group reader and the lag reader
	// (zero: plaintext).
	Security event.Security
	// CloseAfter (CLOSE_AFTER, the closer's) dates the payBy an UNPAID
	// event shows: reservedAt + CloseAfter.
	CloseAfter time.Duration
}

func (c *Config) defaults() {
	if c.Topic == "" {
		c.Topic = event.Topic
	}
	if c.DLQTopic == "" {
		c.DLQTopic = event.DLQTopic
	}
	if c.GroupID == "" {
		c.GroupID = groupVar.Default
	}
	setting.DefaultTo(&c.BatchSize, batchSizeVar.Int())
	setting.DefaultTo(&c.BatchWait, batchWaitVar.Duration())
	setting.DefaultTo(&c.SweepInterval, 2*time.Second)
	setting.DefaultTo(&c.SweepAfter, 5*time.Second)
	setting.DefaultTo(&c.LagInterval, lagIntervalVar.Duration())
	setting.DefaultTo(&c.CloseAfter, order.CloseAfterVar.Duration())
}

// batchTimeout bounds one attempt at a batch (Redis claims, the Postgres
// transaction, acks and compensations).
const batchTimeout = 30 * time.Second

// Producer sends dead letters; *kafka.Writer is one.
type Producer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Deps are the worker's collaborators.
type Deps struct {
	Orders  *order.Store
	Stock   *stock.Store
	DLQ     Producer
	Metrics *telemetry.Metrics
	Log     *slog.Logger
}

// Worker is one consumer-group member.
type Worker struct {
	cfg     Config
	deps    Deps
	applier *outbox.Applier
	pgCB    *breaker.Breaker
}

// New builds a worker.
func New(cfg Config, deps Deps) *Worker {
	cfg.defaults()
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	// Every known reason is a series from the start, so a rate() alert on
	// one works before its first rejection.
	for _, reason := range []string{order.ReasonDBStockMismatch, order.ReasonDuplicateLiveOrder, order.ReasonKeyReused} {
		deps.Metrics.OrdersRejected.WithLabelValues(reason)
	}
	return &Worker{cfg: cfg, deps: deps, applier: &outbox.Applier{Orders: deps.Orders, Stock: deps.Stock, Log: deps.Log},
		pgCB: breaker.New("worker-postgres", breaker.Settings{OpenFor: cfg.BreakerOpenFor}, deps.Metrics.BreakerState)}
}

// Run consumes until ctx ends; the batch in hand is finished first.
func (w *Worker) Run(ctx context.Context) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: w.cfg.Brokers,
		Dialer:  w.cfg.Security.Dialer(10 * time.Second),
		// Why consumption stalls (a dead leader or coordinator, a
		// rebalance) is otherwise invisible: kafka-go retries silently.
		ErrorLogger: newReaderLog(w.deps.Log),
		GroupID:     w.cfg.GroupID,
		Topic:       w.cfg.Topic,
		MinBytes:    1,
		MaxBytes:    10 << 20,
		// Bounds how long a fetch of a partition with nothing new waits; one
		// with data returns at once (MinBytes 1), so this is not a latency.
		// kafka-go sets the read deadline to MaxWait and asks the broker to
		// wait MaxWait minus 1 s (minus a quarter of it under 1 s): that
		// difference is all the time the answer has to arrive. At 50 ms it
		// was 12.5 ms, which a busy process misses — an i/o timeout, a WARN
		// and a reconnect per idle partition, a flood of them beside one hot
		// partition; at 800 ms, 200 ms, which `make run` under a closed loop
		// at c=500 still missed now and then. 1.5 s leaves 1 s, and the
		// broker waits 0.5 s: what a stopping or rebalancing reader may wait
		// for its fetch.
		MaxWait:          1500 * time.Millisecond,
		ReadBatchTimeout: 2 * time.Second,
		QueueCapacity:    w.cfg.BatchSize,
		CommitInterval:   0, // synchronous: an offset is committed only when we say so
		StartOffset:      kafka.FirstOffset,
		JoinGroupBackoff: 500 * time.Millisecond,
		// A killed worker never says goodbye: the group notices only when its
		// session times out, and its partitions wait that long (kafka-go's
		// default is 30 s). 6 s is the brokers' usual minimum.
		SessionTimeout:    6 * time.Second,
		HeartbeatInterval: time.Second,
		RebalanceTimeout:  6 * time.Second,
		ReadBackoffMin:    10 * time.Millisecond,
		ReadBackoffMax:    500 * time.Millisecond,
		MaxAttempts:       5,
	})
	defer r.Close()

	// The background loops end with Run, however Run ends.
	loopCtx, stopLoops := context.WithCancel(ctx)
	sweepDone := make(chan struct{})
	go func() { defer close(sweepDone); w.sweepLoop(loopCtx) }()
	defer func() { <-sweepDone }()
	lagDone := make(chan struct{})
	go func() { defer close(lagDone); w.lagLoop(loopCtx) }()
	defer func() { <-lagDone }()
	defer stopLoops()

	for {
		batch, err := w.fetch(ctx, r)
		if len(batch) == 0 {
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				w.deps.Log.Warn("fetching messages", "err", err)
				sleep(ctx, 200*time.Millisecond)
			}
			continue
		}
		// Finish the batch in hand even while stopping: it is bounded.
		if err := w.handle(context.WithoutCancel(ctx), ctx, r, batch); err != nil {
			return err
		}
	}
}

// fetch blocks for one message, then gathers more for up to BatchWait.
func (w *Worker) fetch(ctx context.Context, r *kafka.Reader) ([]kafka.Message, error) {
	first, err := r.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	batch := []kafka.Message{first}
	wctx, cancel := context.WithTimeout(ctx, w.cfg.BatchWait)
	defer cancel()
	for len(batch) < w.cfg.BatchSize {
		m, err := r.FetchMessage(wctx)
		if err != nil {
			break
		}
		batch = append(batch, m)
	}
	return batch, nil
}

// handle processes a batch until it succeeds (retrying with backoff while a
// dependency is down) and commits its offsets. It gives up only when stop
// ends; the offsets stay uncommitted and the batch is redelivered.
func (w *Worker) handle(ctx, stop context.Context, r *kafka.Reader, batch []kafka.Message) error {
	backoff := 100 * time.Millisecond
	for {
		// Bounded per attempt: a Postgres that hangs instead of refusing
		// must end in a retry, not a worker stuck forever.
		actx, cancel := context.WithTimeout(ctx, batchTimeout)
		err := w.ProcessBatch(actx, batch)
		cancel()
		if err == nil {
			break
		}
		w.deps.Log.Error("batch failed, retrying", "size", len(batch), "err", err, "backoff", backoff)
		if !sleep(stop, backoff) {
			return nil
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	for {
		err := r.CommitMessages(ctx, batch...)
		if err == nil {
			return nil
		}
		w.deps.Log.Error("committing offsets", "err", err)
		if !sleep(stop, backoff) {
			return nil
		}
	}
}

// ProcessBatch does everything a batch needs except committing offsets:
// dead-letters the invalid messages, claims the reservations the messages
// name, decides them from their journal entries in one Postgres transaction,
// then acks and compensates in Redis. Safe to call
// again with the same messages.
//
// Tracing: each message gets a "process" span continuing the trace its
// headers carry (the gateway's send span), ended once its fate is known; the
// batch gets one span, parent of the batch's Postgres and Redis work, linked
// to every message's context (and each message span links back to it).
func (w *Worker) ProcessBatch(ctx context.Context, batch []kafka.Message) (err error) {
	w.deps.Metrics.BatchSize.Observe(float64(len(batch)))
	ctx, bspan := event.StartBatch(ctx, w.cfg.Topic, w.cfg.GroupID, len(batch))
	msgs := w.startMessages(ctx, bspan, batch)
	defer func() {
		for _, m := range msgs {
			telemetry.RecordError(m.span, err)
			m.span.End()
		}
		telemetry.RecordError(bspan, err)
		bspan.End()
	}()

	ptrs, dead, deadIdx := pointersOf(batch, msgs)
	msgOf := messagesOf(ctx, ptrs, msgs)
	if err := w.deadLetter(ctx, batch, msgs, dead, deadIdx); err != nil {
		return err
	}
	live, invalid, err := w.claimAndDecide(ctx, ptrs, msgs)
	if err != nil {
		return err
	}
	if err := w.releaseInvalid(invalid); err != nil {
		return err
	}
	if len(live) == 0 {
		return nil
	}

	var decisions []order.Decision
	err = w.pgCB.Do(func() error {
		var err error
		start := time.Now()
		decisions, err = w.deps.Orders.DecideBatch(ctx, live)
		if err == nil {
			w.deps.Metrics.BatchCommitSeconds.Observe(time.Since(start).Seconds())
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, d := range decisions {
		_, idx := msgOf(refOf(d))
		for _, k := range idx {
			msgs[k].outcome(string(d.Outcome), d.Reason)
		}
	}
	w.afterCommit(ctx, decisions, msgOf)
	return nil
}

// pointersOf reads the batch as pointers to reservations, in batch order
// (for a deterministic batch), and the dead letters of its invalid
// messages with their index in the batch.
//
// A message is only a pointer to a reservation: which item, requestId and
// orderNo. What the reservation is — the user, the quantity — is the
// journal entry the gateway wrote, read back by the claim. So a corrupt,
// truncated or altered copy of an event, dead-lettered or not, can neither
// create, nor release, nor alter an order.
func pointersOf(batch []kafka.Message, msgs []msgTrace) (ptrs []*pointer, dead []kafka.Message, deadIdx []int) {
	byKey := map[pointerKey]*pointer{}
	for i, m := range batch {
		ev, err := event.Decode(m.Value)
		if err == nil && !event.Signed(m) {
			// Valid, but not the gateway's (foreign, or a copy whose value
			// was changed): only a pointer, like any invalid message.
			err = event.ErrNotSigned
		}
		valid := err == nil
		if !valid {
			telemetry.RecordError(msgs[i].span, err)
			msgs[i].outcome("DEAD_LETTERED", "")
			dead = append(dead, deadLetter(m, err))
			deadIdx = append(deadIdx, i)
			var ok bool
			if ev, ok = event.DecodeRef(m.Value); !ok {
				continue // names no reservation: nothing more to do
			}
		}
		msgs[i].order(ev.RequestID, ev.OrderNo)
		k := pointerKey{it: stock.Item{ActivityID: ev.ActivityID, ItemID: ev.ItemID, Bucket: ev.Bucket},
			ref: stock.Ref{RequestID: ev.RequestID, OrderNo: ev.OrderNo}}
		p := byKey[k]
		if p == nil {
			p = &pointer{key: k}
			byKey[k] = p
			ptrs = append(ptrs, p)
		}
		p.msgs = append(p.msgs, i)
		if valid && p.msg == nil {
			e := ev
			p.msg = &e
		}
		if !valid {
			p.dead = append(p.dead, i)
		}
	}
	return ptrs, dead, deadIdx
}

// messagesOf maps a reservation to the context of the (first) message that
// named it and its valid messages, whose spans get the outcome (the
// batch's context and none for a reservation no message named).
func messagesOf(ctx context.Context, ptrs []*pointer, msgs []msgTrace) func(stock.Ref) (context.Context, []int) {
	ctxOf := map[stock.Ref]context.Context{}
	idxOf := map[stock.Ref][]int{}
	for _, p := range ptrs {
		if _, ok := ctxOf[p.key.ref]; !ok {
			ctxOf[p.key.ref] = msgs[p.msgs[0]].ctx
		}
		for _, i := range p.msgs {
			if !slices.Contains(p.dead, i) {
				idxOf[p.key.ref] = append(idxOf[p.key.ref], i)
			}
		}
	}
	return func(ref stock.Ref) (context.Context, []int) {
		if c, ok := ctxOf[ref]; ok {
			return c, idxOf[ref]
		}
		return ctx, nil
	}
}

// deadLetter writes the batch's dead letters to the DLQ topic and logs
// each with the requestId it names.
func (w *Worker) deadLetter(ctx context.Context, batch []kafka.Message, msgs []msgTrace, dead []kafka.Message, deadIdx []int) error {
	if len(dead) == 0 {
		return nil
	}
	if err := w.deps.DLQ.WriteMessages(ctx, dead...); err != nil {
		return fmt.Errorf("writing dead letters: %w", err)
	}
	w.deps.Metrics.DLQ.Add(float64(len(dead)))
	for j, m := range dead {
		src := batch[deadIdx[j]]
		attrs := []any{"error", event.Header(m, event.HeaderError), "partition", src.Partition, "offset", src.Offset}
		// The request-id header when the message has one; else the
		// requestId its value names, which the context carries, so the
		// line is found by the id all the same.
		if rid := event.Header(m, event.HeaderRequestID); rid != "" {
			attrs = append(attrs, "request_id", rid)
		}
		w.deps.Log.WarnContext(msgs[deadIdx[j]].ctx, "message dead-lettered", attrs...)
	}
	return nil
}

// claimAndDecide claims the reservations item by item and decides each
// from its claim: the orders to decide in Postgres (live), the entries too
// broken to decide (invalid), ghosts skipped.
func (w *Worker) claimAndDecide(ctx context.Context, ptrs []*pointer, msgs []msgTrace) (live []order.Request, invalid []invalidEntry, err error) {
	byItem := map[stock.Item][]*pointer{}
	var items []stock.Item
	for _, p := range ptrs {
		if byItem[p.key.it] == nil {
			items = append(items, p.key.it)
		}
		byItem[p.key.it] = append(byItem[p.key.it], p)
	}
	for _, it := range items {
		ps := byItem[it]
		refs := make([]stock.Ref, len(ps))
		for i, p := range ps {
			refs[i] = p.key.ref
		}
		claims, err := w.deps.Stock.ClaimEntries(ctx, it, refs)
		if err != nil {
			return nil, nil, fmt.Errorf("claiming reservations of %s: %w", it, err)
		}
		for i, p := range ps {
			mctx := msgs[p.msgs[0]].ctx
			r, decided := w.decide(mctx, p, claims[i])
			switch decided {
			case decideGhost:
				w.deps.Metrics.Ghosts.Inc()
				for _, k := range p.msgs {
					if !slices.Contains(p.dead, k) {
						msgs[k].outcome("GHOST", "")
					}
				}
				w.deps.Log.InfoContext(mctx, "skipping event of an aborted reservation", "request_id", p.key.ref.RequestID, "order_no", p.key.ref.OrderNo)
			case decideInvalidEntry:
				invalid = append(invalid, invalidEntry{it: it, ref: p.key.ref, entry: claims[i].Entry, ctx: mctx})
			case decideOrder:
				r.TraceParent = telemetry.TraceParent(mctx) // the order's status events continue its trace
				r.PayBy = r.ReservedAt.Add(w.cfg.CloseAfter)
				live = append(live, r)
			}
		}
	}
	return live, invalid, nil
}

// afterCommit acks created orders' journal entries and applies the batch's
// compensations, each in the context of its message. Failures are left to
// the sweeper and the redrive: the decisions are already durable.
func (w *Worker) afterCommit(ctx context.Context, decisions []order.Decision, msgOf func(stock.Ref) (context.Context, []int)) {
	acks := map[stock.Item][]stock.Ref{}
	var comps []order.Compensation
	var compCtxs []context.Context
	for _, d := range decisions {
		it := stock.Item{ActivityID: d.ActivityID, ItemID: d.ItemID, Bucket: d.Bucket}
		mctx, _ := msgOf(refOf(d))
		switch d.Outcome {
		case order.Created:
			w.deps.Metrics.OrdersCreated.Inc()
			acks[it] = append(acks[it], stock.Ref{RequestID: d.RequestID, OrderNo: d.OrderNo})
		case order.Duplicate:
			w.deps.Metrics.Duplicates.Inc()
			if d.Prior == order.Created {
				acks[it] = append(acks[it], stock.Ref{RequestID: d.RequestID, OrderNo: d.OrderNo})
			}
		case order.Rejected, order.Foreign:
			w.deps.Metrics.OrdersRejected.WithLabelValues(d.Reason).Inc()
			// A requestId reused for another item is the client's mistake,
			// answered by the REJECTED record: nothing for an operator to do.
			level := slog.LevelWarn
			if d.Reason == order.ReasonKeyReused {
				level = slog.LevelInfo
			}
			w.deps.Log.Log(mctx, level, "reservation rejected by postgres", "request_id", d.RequestID, "order_no", d.OrderNo, "reason", d.Reason)
		}
		if d.Compensation != nil {
			comps = append(comps, *d.Compensation)
			compCtxs = append(compCtxs, mctx)
		}
	}
	for it, refs := range acks {
		if _, err := w.deps.Stock.Ack(ctx, it, refs); err != nil {
			w.deps.Log.Warn("acking journal entries", "item", it.String(), "err", err)
		}
	}
	for i, c := range comps {
		// One at a time, so each release span is a child of its message's.
		res, err := w.applier.Apply(compCtxs[i], []order.Compensation{c})
		w.deps.Metrics.CompensationsApplied.Add(float64(res.Applied))
		w.deps.Metrics.CompensationsFailed.Add(float64(res.Failed))
		if err != nil {
			w.deps.Log.WarnContext(compCtxs[i], "applying compensations", "err", err)
		}
	}
}

func refOf(d order.Decision) stock.Ref { return stock.Ref{RequestID: d.RequestID, OrderNo: d.OrderNo} }

// msgTrace is one message's process span and context.
type msgTrace struct {
	ctx  context.Context
	span trace.Span
}

// startMessages starts the process span of every message of a batch and
// links the batch span to each message's producer context.
func (w *Worker) startMessages(ctx context.Context, bspan trace.Span, batch []kafka.Message) []msgTrace {
	batchLink := trace.LinkFromContext(ctx)
	out := make([]msgTrace, len(batch))
	for i, m := range batch {
		mctx, span := event.StartProcess(ctx, w.cfg.Topic, w.cfg.GroupID, m, batchLink)
		out[i] = msgTrace{ctx: mctx, span: span}
		if bspan.IsRecording() {
			if sc := trace.SpanContextFromContext(event.Extract(context.Background(), m)); sc.IsValid() {
				bspan.AddLink(trace.Link{SpanContext: sc})
			}
		}
	}
	return out
}

// order marks the message as carrying that reservation.
func (m *msgTrace) order(requestID, orderNo string) {
	m.ctx = telemetry.WithOrder(m.ctx, requestID, orderNo)
	if m.span.IsRecording() {
		m.span.SetAttributes(telemetry.OrderAttrs(requestID, orderNo)...)
	}
}

// outcome records what became of the message's reservation.
func (m *msgTrace) outcome(outcome, reason string) {
	if !m.span.IsRecording() {
		return
	}
	m.span.SetAttributes(telemetry.AttrOutcome.String(outcome))
	if reason != "" {
		m.span.SetAttributes(telemetry.AttrReason.String(reason))
	}
}

// Dead letters are bounded, so one always fits the DLQ topic (a broker's
// message.max.bytes is 1 MiB by default) and a poison message of any size
// never stops its partition: a longer value is cut to MaxDeadLetterValue
// bytes, a longer key to MaxDeadLetterKey, and the original headers are kept
// only while they total at most MaxDeadLetterHeaders bytes. What was cut is
// said in headers: original-size, truncated, headers-dropped.
const (
	MaxDeadLetterValue   = 64 << 10
	MaxDeadLetterKey     = 1 << 10
	MaxDeadLetterHeaders = 16 << 10
)

func deadLetter(m kafka.Message, cause error) kafka.Message {
	var headers []kafka.Header
	size := 0
	for _, h := range m.Headers {
		size += len(h.Key) + len(h.Value)
	}
	if size <= MaxDeadLetterHeaders {
		headers = append(headers, m.Headers...)
	} else {
		headers = append(headers, kafka.Header{Key: event.HeaderHeadersDropped, Value: []byte(fmt.Sprint(len(m.Headers)))})
	}
	errText := cause.Error()
	if len(errText) > 1024 {
		errText = errText[:1024]
	}
	headers = append(headers,
		kafka.Header{Key: event.HeaderError, Value: []byte(errText)},
		kafka.Header{Key: event.HeaderSourcePartition, Value: []byte(fmt.Sprint(m.Partition))},
		kafka.Header{Key: event.HeaderSourceOffset, Value: []byte(fmt.Sprint(m.Offset))},
		kafka.Header{Key: event.HeaderOriginalSize, Value: []byte(fmt.Sprint(len(m.Value)))},
	)
	key, value := m.Key, m.Value
	if len(value) > MaxDeadLetterValue || len(key) > MaxDeadLetterKey {
		headers = append(headers, kafka.Header{Key: event.HeaderTruncated, Value: []byte("true")})
		value = value[:min(len(value), MaxDeadLetterValue)]
		key = key[:min(len(key), MaxDeadLetterKey)]
	}
	return kafka.Message{Key: key, Value: value, Headers: headers}
}

// sweepLoop sweeps every SweepInterval until ctx ends.
func (w *Worker) sweepLoop(ctx context.Context) {
	tick.Every(ctx, w.cfg.SweepInterval, func() { w.sweep(ctx) })
}

// sweep applies the compensations due and sets the backlog gauges.
func (w *Worker) sweep(ctx context.Context) {
	// All reasons, with per-row backoff; the release script's guard makes a
	// race with the closer's own sweep harmless.
	res, err := w.applier.SweepDue(ctx, ctx, "", outbox.Backoff{Base: w.cfg.SweepAfter, Max: time.Minute}, 200)
	w.deps.Metrics.CompensationsApplied.Add(float64(res.Applied))
	w.deps.Metrics.CompensationsFailed.Add(float64(res.Failed))
	if err != nil && !errors.Is(err, context.Canceled) {
		w.deps.Log.Warn("sweeping compensations", "err", err)
	}
	if n, oldest, err := w.deps.Orders.CompensationBacklog(ctx); err == nil {
		w.deps.Metrics.CompensationsPending.Set(float64(n))
		w.deps.Metrics.CompensationsOldest.Set(oldest.Seconds())
	}
}

// sleep waits d or until ctx ends; it reports whether the full wait elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
