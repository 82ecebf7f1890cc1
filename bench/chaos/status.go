package chaos

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/relay"
)

// auditStatus checks I7 on the activity once the relay has drained the
// outbox: every state its orders reached is on orders.status, in version
// order per orderNo, and nothing Postgres did not commit (relay.Audit, the
// checker of the tests and the load tool). It returns the violations.
func (s *Suite) auditStatus(ctx context.Context, act int64) []string {
	orders := order.NewStore(s.pool)
	if err := relay.WaitPublished(ctx, orders, time.Minute); err != nil {
		return []string{"I7: " + err.Error()}
	}
	client := &kafka.Client{Addr: kafka.TCP(s.brokers...), Timeout: 10 * time.Second}
	problems, err := relay.Audit(ctx, orders, client, event.StatusTopic, act)
	if err != nil {
		problems = append(problems, "I7: reading orders.status: "+err.Error())
	}
	return problems
}
