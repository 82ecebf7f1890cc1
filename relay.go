package main

import (
	"context"
	"log/slog"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/relay"
	"orderpipe/pkg/telemetry"
)

// startRelay builds the relay of orders.status on the configuration; the
// returned function runs it until ctx ends and closes its writer.
func startRelay(cfg config, orders *order.Store, metrics *telemetry.Metrics, log *slog.Logger) func(context.Context) error {
	w := event.NewWriter(event.WriterConfig{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaStatusTopic, BatchTimeout: cfg.KafkaBatchWait,
		Security: cfg.KafkaSecurity})
	r := relay.New(relay.Config{Topic: cfg.KafkaStatusTopic, Interval: cfg.RelayInterval, BatchSize: cfg.RelayBatchSize,
		Retention: cfg.StatusRetention}, relay.Deps{Orders: orders, Writer: w, Metrics: metrics, Log: log.With("component", "relay")})
	return func(ctx context.Context) error {
		defer w.Close()
		return r.Run(ctx)
	}
}
