// Package relay publishes the outbox of orders.status: the order_events
// rows every state change of an order writes in its own transaction
// (pkg/order). It publishes each committed row at least once, keyed by
// orderNo and acknowledged by all in-sync replicas, and one order's rows in
// version order; then it marks them published, and deletes published rows
// after a retention. Any number of replicas may run: a replica holds the
// rows it publishes with FOR UPDATE SKIP LOCKED, and takes only the lowest
// unpublished version of each order, so no two replicas ever have two
// versions of one order in flight (order.Store.RelayEvents). Through a
// broker or Postgres outage it retries with backoff; nothing is marked
// that the broker did not acknowledge. It never decides an order's state
// and never writes one: it only carries what Postgres committed.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/setting"
	"orderpipe/pkg/telemetry"
)

// Config is the relay's configuration.
type Config struct {
	// Topic is where events go (KAFKA_STATUS_TOPIC).
	Topic string
	// Interval is the pause between passes when the outbox is drained
	// (RELAY_INTERVAL); after a failure the pause doubles up to MaxBackoff.
	Interval   time.Duration
	MaxBackoff time.Duration
	// BatchSize caps the events of one transaction (and one produce).
	BatchSize int
	// Retention is how long published rows are kept (STATUS_RETENTION),
	// for `orderpipe locate` and for a republish by hand.
	Retention time.Duration
	// PruneInterval is the pause between prunes.
	PruneInterval time.Duration
}

func (c *Config) defaults() {
	if c.Topic == "" {
		c.Topic = event.StatusTopic
	}
	setting.DefaultTo(&c.Interval, intervalVar.Duration())
	setting.DefaultTo(&c.MaxBackoff, 5*time.Second)
	setting.DefaultTo(&c.BatchSize, batchSizeVar.Int())
	setting.DefaultTo(&c.Retention, retentionVar.Duration())
	setting.DefaultTo(&c.PruneInterval, time.Minute)
}

// Writer sends messages; *kafka.Writer (event.NewWriter: acks=all, hash
// partitioner) is one.
type Writer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Deps are the relay's collaborators.
type Deps struct {
	Orders  *order.Store
	Writer  Writer
	Metrics *telemetry.Metrics // nil ⇒ a private registry
	Log     *slog.Logger
	// BeforeMarkFunc, when set, runs after a batch was published and before
	// it is marked; an error fails the pass there, as a crash would (tests
	// inject one to see a republish).
	BeforeMarkFunc func(ctx context.Context, evs []order.StatusEvent) error
}

// Relay is one relay replica.
type Relay struct {
	cfg  Config
	deps Deps
}

// New builds a relay.
func New(cfg Config, deps Deps) *Relay {
	cfg.defaults()
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Metrics == nil {
		deps.Metrics = telemetry.NewMetrics()
	}
	return &Relay{cfg: cfg, deps: deps}
}

// Result counts one pass.
type Result struct {
	Published int
	Pruned    int64
}

// passTimeout bounds one transaction's publish and mark.
const passTimeout = 20 * time.Second

// Run passes until ctx ends: publishes what the outbox holds, then waits
// Interval (more after a failure), and prunes every PruneInterval. A
// batch in hand is finished (published and marked, or left) before it
// returns.
func (r *Relay) Run(ctx context.Context) error {
	r.deps.Log.Info("relay started", "topic", r.cfg.Topic, "interval", r.cfg.Interval.String(), "retention", r.cfg.Retention.String())
	wait := r.cfg.Interval
	var lastPrune, lastGauge time.Time
	for ctx.Err() == nil {
		res, err := r.drain(ctx)
		if err == nil && time.Since(lastPrune) >= r.cfg.PruneInterval {
			lastPrune = time.Now()
			res.Pruned, err = r.prune(ctx)
		}
		if time.Since(lastGauge) >= time.Second || err != nil {
			lastGauge = time.Now()
			r.gauge(ctx)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			r.deps.Metrics.RelayPasses.WithLabelValues("error").Inc()
			r.deps.Log.Error("relay pass failed; retrying", "err", err, "published", res.Published, "retry_in", wait.String())
			wait = min(2*wait, r.cfg.MaxBackoff)
		case err == nil:
			r.deps.Metrics.RelayPasses.WithLabelValues("ok").Inc()
			wait = r.cfg.Interval
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// RunOnce publishes until the outbox has nothing more to hand (tests and
// the invariant checker drain it with this).
func (r *Relay) RunOnce(ctx context.Context) (Result, error) {
	res, err := r.drain(ctx)
	r.gauge(ctx)
	return res, err
}

// drain publishes batch after batch until one is short of BatchSize (an
// order with several unpublished versions needs a batch per version).
func (r *Relay) drain(ctx context.Context) (Result, error) {
	var res Result
	for {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), passTimeout)
		n, handed, err := r.batch(pctx)
		cancel()
		res.Published += n
		if err != nil {
			return res, err
		}
		if handed == 0 || ctx.Err() != nil {
			return res, nil
		}
	}
}

// batch publishes one transaction's events; handed is how many the outbox
// handed (0: nothing to do).
func (r *Relay) batch(ctx context.Context) (published, handed int, err error) {
	published, err = r.deps.Orders.RelayEvents(ctx, r.cfg.BatchSize, func(ctx context.Context, evs []order.StatusEvent) ([]int64, error) {
		handed = len(evs)
		return r.publish(ctx, evs)
	})
	return published, handed, err
}

// publish sends evs and returns the IDs of those the broker acknowledged.
// Each message's send span continues its order's trace (the traceparent
// the change stored); the batch's span links to every one of them.
func (r *Relay) publish(ctx context.Context, evs []order.StatusEvent) (ids []int64, err error) {
	ctx, span := telemetry.Tracer().Start(ctx, "relay "+r.cfg.Topic, trace.WithSpanKind(trace.SpanKindProducer))
	defer func() {
		telemetry.RecordError(span, err)
		span.End()
	}()
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingSystemKafka, semconv.MessagingDestinationName(r.cfg.Topic),
			semconv.MessagingOperationName("send"), semconv.MessagingOperationTypeSend, semconv.MessagingBatchMessageCount(len(evs)))
	}
	msgs := make([]kafka.Message, 0, len(evs))
	sendIdx := make([]int, 0, len(evs)) // evs index of each message
	spans := make([]trace.Span, 0, len(evs))
	var undecodable []int64
	for i, e := range evs {
		st, derr := event.ParseStored(e.Payload)
		if derr != nil {
			// Only this package's own SQL writes payloads: a row that
			// does not decode is a bug, and stopping the outbox for it
			// would stop every later event. It is logged and skipped.
			r.deps.Log.Error("status event does not decode; skipped", "order_no", e.OrderNo, "version", e.Version, "err", derr)
			undecodable = append(undecodable, e.ID)
			continue
		}
		msg := event.StatusMessage(st)
		octx := context.WithoutCancel(ctx)
		if sc, ok := telemetry.ParseTraceParent(e.TraceParent); ok {
			octx = trace.ContextWithRemoteSpanContext(octx, sc)
			if span.IsRecording() {
				span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("link.reason", "order")}})
			}
		}
		octx = telemetry.WithOrder(octx, st.RequestID, st.OrderNo)
		_, sspan := event.StartSend(octx, r.cfg.Topic, &msg)
		if sspan.IsRecording() {
			sspan.SetAttributes(telemetry.OrderAttrs(st.RequestID, st.OrderNo)...)
			sspan.SetAttributes(attribute.String("order.status", st.Status), attribute.Int("order.status_version", st.Version))
		}
		msgs = append(msgs, msg)
		sendIdx = append(sendIdx, i)
		spans = append(spans, sspan)
	}
	ids = undecodable
	var werr error
	if len(msgs) > 0 {
		werr = r.deps.Writer.WriteMessages(ctx, msgs...)
	}
	var wes kafka.WriteErrors
	for j, i := range sendIdx {
		var merr error
		switch {
		case werr == nil:
		case errors.As(werr, &wes) && len(wes) == len(msgs):
			merr = wes[j]
		default:
			merr = werr
		}
		event.EndSend(spans[j], merr)
		if merr != nil {
			r.deps.Metrics.StatusFailed.Inc()
			continue
		}
		ids = append(ids, evs[i].ID)
		r.deps.Metrics.StatusPublished.WithLabelValues(evs[i].Status).Inc()
	}
	if werr != nil {
		werr = fmt.Errorf("writing to %s: %w", r.cfg.Topic, werr)
	}
	if f := r.deps.BeforeMarkFunc; f != nil && len(ids) > 0 {
		if err := f(ctx, evs); err != nil {
			return nil, errors.Join(werr, fmt.Errorf("before marking: %w", err))
		}
	}
	return ids, werr
}

// prune deletes published rows older than the retention, a bounded chunk
// at a time.
func (r *Relay) prune(ctx context.Context) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, passTimeout)
		n, err := r.deps.Orders.PruneEvents(pctx, r.cfg.Retention, 5000)
		cancel()
		total += n
		r.deps.Metrics.StatusPruned.Add(float64(n))
		if err != nil {
			return total, err
		}
		if n < 5000 {
			break
		}
	}
	return total, nil
}

// gauge sets the backlog gauges (left as they were if Postgres cannot say).
func (r *Relay) gauge(ctx context.Context) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	n, oldest, err := r.deps.Orders.EventBacklog(gctx)
	if err != nil {
		return
	}
	r.deps.Metrics.StatusPending.Set(float64(n))
	r.deps.Metrics.StatusOldest.Set(oldest.Seconds())
}
