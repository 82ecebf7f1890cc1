package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/invariant"
	"orderpipe/worker/relay"
)

// assertStatusEvents checks I7 for an activity (invariant.AuditStatus): every state
// its orders reached is on the pipeline's orders.status topic, in version
// order per orderNo, and nothing Postgres did not commit.
func (p *pipeline) assertStatusEvents(tb testing.TB, activityID int64) {
	tb.Helper()
	ctx := context.Background()
	p.publishStatus(tb)
	if err := invariant.WaitPublished(ctx, p.Orders, 30*time.Second); err != nil {
		tb.Errorf("I7: %v", err)
		return
	}
	st := p.statusTopic()
	problems, err := invariant.AuditStatus(ctx, p.Orders, st.Client, st.Topic, activityID)
	if err != nil {
		tb.Fatalf("I7: auditing orders.status: %v", err)
	}
	for _, pr := range problems {
		tb.Error(pr)
	}
}

// publishStatus publishes the status outbox as a relay replica would, when
// the pipeline runs without the relay.
func (p *pipeline) publishStatus(tb testing.TB) {
	tb.Helper()
	if slices.Contains(targets(&config{}).Resolve(p.comps), "relay") {
		return
	}
	w := event.NewWriter(event.WriterConfig{Brokers: p.Cfg.Kafka.Brokers, Topic: p.Cfg.Kafka.StatusTopic, Security: p.Cfg.Kafka.Security})
	defer w.Close()
	r := relay.New(relay.Config{Topic: p.Cfg.Kafka.StatusTopic}, relay.Deps{Orders: p.Orders, Writer: w, Log: testLog()})
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := r.RunOnce(context.Background())
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				tb.Errorf("I7: publishing the status outbox: %v", err)
			}
			return
		}
	}
}

// statusTopic is where the invariant checker reads orders.status (I7).
func (p *pipeline) statusTopic() *invariant.StatusTopic {
	return &invariant.StatusTopic{Topic: p.Cfg.Kafka.StatusTopic, Wait: 30 * time.Second,
		Client: &kafka.Client{Addr: kafka.TCP(p.Cfg.Kafka.Brokers...), Timeout: 10 * time.Second, Transport: p.Cfg.Kafka.Security.Transport(5 * time.Second)}}
}
