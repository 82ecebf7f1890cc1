package dlq

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
)

// Producer publishes events; *kafka.Writer is one.
type Producer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Outcome is what a replay did with one dead letter.
type Outcome string

const (
	// Replayed: valid now, published to the order topic, recorded.
	Replayed Outcome = "REPLAYED"
	// AlreadyReplayed: recorded as replayed before; not published again.
	AlreadyReplayed Outcome = "ALREADY_REPLAYED"
	// StillInvalid: the event schema still refuses it; not published.
	StillInvalid Outcome = "STILL_INVALID"
	// NotFound: no dead letter at the position asked for.
	NotFound Outcome = "NOT_FOUND"
)

// Result is one dead letter's replay.
type Result struct {
	Position
	Outcome   Outcome `json:"outcome"`
	RequestID string  `json:"requestId,omitempty"`
	OrderNo   string  `json:"orderNo,omitempty"`
	// Reason says why a StillInvalid letter was refused.
	Reason     string    `json:"reason,omitempty"`
	ReplayedAt time.Time `json:"replayedAt,omitzero"`
}

// Replayer publishes dead letters back to the order topic, each at most once.
type Replayer struct {
	Orders   *order.Store // keeps the replay records
	Producer Producer     // writes to Topic
	DLQTopic string
	Topic    string
	// PublishTimeout bounds one publish (default 10 s).
	PublishTimeout time.Duration
}

// Replay re-validates l with the event schema and, if it passes and was not
// replayed before, publishes it to the order topic: the event's bytes as the
// worker refused them, keyed and headed like the gateway's (schema,
// request-id), with the trace context it carried and a dlq-replay-of header.
//
// The replay's row in dlq_replays is inserted first and committed only after
// the broker acknowledged the event; a concurrent replay of the same letter
// waits on that row and then finds it. So a letter is published at most once
// per committed row, and a failed publish leaves no row (it can be retried).
// One window remains: the process dies after the broker's acknowledgement and
// before the commit, and a later replay publishes it again — a duplicate the
// worker's idempotency table (processed_requests) makes harmless.
func (r Replayer) Replay(ctx context.Context, l Letter) (Result, error) {
	res := Result{Position: l.Position, RequestID: l.RequestID, OrderNo: l.OrderNo}
	ev, err := l.Event()
	if err != nil {
		res.Outcome, res.Reason = StillInvalid, err.Error()
		return res, nil
	}
	res.RequestID, res.OrderNo = ev.RequestID, ev.OrderNo

	claim, prior, err := r.Orders.ClaimReplay(ctx, order.DLQReplay{DLQTopic: r.DLQTopic, Partition: l.Partition, Offset: l.Offset,
		RequestID: ev.RequestID, OrderNo: ev.OrderNo, Topic: r.Topic})
	if err != nil {
		return res, fmt.Errorf("recording the replay of %s: %w", l.Position, err)
	}
	if prior != nil {
		// Replayed before (or just now by a concurrent replay, whose commit
		// this claim waited for).
		res.Outcome, res.ReplayedAt = AlreadyReplayed, prior.ReplayedAt
		return res, nil
	}
	defer claim.Rollback(ctx)
	if err := r.publish(ctx, l, ev); err != nil {
		return res, fmt.Errorf("publishing %s to %s (not recorded; a later replay retries it): %w", l.Position, r.Topic, err)
	}
	if err := claim.Commit(ctx); err != nil {
		return res, fmt.Errorf("%s was published to %s but its replay could not be recorded (a later replay may publish it again; the worker skips the duplicate): %w",
			l.Position, r.Topic, err)
	}
	res.Outcome, res.ReplayedAt = Replayed, claim.At
	return res, nil
}

// traceHeaders are the headers of the original message a replay keeps, so
// the worker's span joins the request's trace.
var traceHeaders = []string{"traceparent", "tracestate", "baggage"}

func (r Replayer) publish(ctx context.Context, l Letter, ev event.OrderRequested) error {
	msg := event.MessageOf(ev, l.Value)
	for _, k := range traceHeaders {
		if v, ok := l.header(k); ok {
			msg.Headers = append(msg.Headers, kafka.Header{Key: k, Value: []byte(v)})
		}
	}
	msg.Headers = append(msg.Headers, kafka.Header{Key: HeaderReplayOf,
		Value: []byte(fmt.Sprintf("%s/%d/%d", r.DLQTopic, l.Partition, l.Offset))})
	timeout := r.PublishTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return r.Producer.WriteMessages(pctx, msg)
}

// Replays returns every recorded replay of the dead-letter topic.
func Replays(ctx context.Context, orders *order.Store, dlqTopic string) (map[Position]Replay, error) {
	recs, err := orders.Replays(ctx, dlqTopic)
	if err != nil {
		return nil, err
	}
	out := make(map[Position]Replay, len(recs))
	for _, rp := range recs {
		out[Position{Partition: rp.Partition, Offset: rp.Offset}] = Replay{RequestID: rp.RequestID, OrderNo: rp.OrderNo,
			Topic: rp.Topic, ReplayedAt: rp.ReplayedAt}
	}
	return out, nil
}
