package worker

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/target"
)

// Start is the worker target: the consumer, the journal redrive and the
// mover on the process's connections.
func Start(p *target.Process, cfg TargetConfig) (stop func(), err error) {
	k := p.Cfg.Kafka
	dlq := k.Writer(k.DLQTopic)
	w := New(Config{Brokers: k.Brokers, Topic: k.Topic, DLQTopic: k.DLQTopic, GroupID: cfg.Group, BatchSize: cfg.BatchSize,
		BatchWait: cfg.BatchWait, BreakerOpenFor: p.Cfg.BreakerOpenFor, LagInterval: cfg.LagInterval, Security: k.Security,
		CloseAfter: cfg.CloseAfter},
		Deps{Orders: p.Orders, Stock: p.Stock, DLQ: dlq, Metrics: p.Metrics, Log: p.Log.With("component", "worker")})
	p.Go("worker", w.Run)
	events := k.Writer(k.Topic)
	tr := k.Security.Transport(lagTimeout)
	offsets := &kafka.Client{Addr: kafka.TCP(k.Brokers...), Transport: tr, Timeout: 10 * time.Second}
	rd := NewRedriver(RedriveConfig{After: cfg.RedriveAfter, Interval: cfg.RedriveInterval, Topic: k.Topic},
		RedriveDeps{Orders: p.Orders, Stock: p.Stock, Events: events, Locker: p.Locker(), Metrics: p.Metrics,
			Log: p.Log.With("component", "redrive"),
			Offsets: func(ctx context.Context) (map[int]PartitionOffsets, error) {
				return GroupOffsets(ctx, offsets, k.Topic, cfg.Group)
			}})
	p.Go("redrive", rd.Run)
	mv := NewMover(MoverConfig{Interval: cfg.MoveInterval}, p.Orders, p.Stock, p.Log.With("component", "mover"))
	p.Go("mover", mv.Run)
	return func() { events.Close(); dlq.Close(); tr.CloseIdleConnections() }, nil
}
