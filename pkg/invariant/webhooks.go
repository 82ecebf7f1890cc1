package invariant

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/webhook"
)

// WebhookEndpoint is a receiver of the orders.status webhooks that I7 is
// judged on, as on the topic: every event of the activity's orders reached
// it, signed with Secret, with the body the contract says, and each order's
// events in version order (an event accepted only after every earlier
// version of its order was, and never after a later one; a duplicate of
// the latest aside).
type WebhookEndpoint struct {
	Name   string
	Secret webhook.Secret
	// Receipts are the webhooks the endpoint accepted (answered 2xx), in
	// the order it accepted them.
	Receipts func() []WebhookReceipt
	// Wait bounds the wait for every event to arrive (0: 30 s).
	Wait time.Duration
}

// WebhookReceipt is one webhook an endpoint accepted: its headers and body.
type WebhookReceipt struct {
	ID, Timestamp, Signature string
	Body                     []byte
}

// webhooks judges I7 on each endpoint once the outbox holds the
// activity's events.
func (c *Checker) webhooks(ctx context.Context, activityID int64) ([]string, error) {
	hist, err := c.Orders.StatusHistories(ctx, activityID)
	if err != nil {
		return nil, err
	}
	want := map[string][]byte{} // webhook-id → the event's value
	for _, h := range hist {
		for _, r := range h.Rows {
			st, err := event.ParseStored(r.Payload)
			if err != nil {
				return nil, fmt.Errorf("outbox row of %s version %d: %w", r.OrderNo, r.Version, err)
			}
			want[webhook.MessageID(r.OrderNo, r.Version)] = event.StatusMessage(st).Value
		}
	}
	var problems []string
	for _, ep := range c.Webhooks {
		wait := ep.Wait
		if wait <= 0 {
			wait = 30 * time.Second
		}
		missing := missingWebhooks(ep.Receipts(), want)
		for deadline := time.Now().Add(wait); len(missing) > 0 && time.Now().Before(deadline); {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
			missing = missingWebhooks(ep.Receipts(), want)
		}
		for i, id := range missing {
			if i == 5 {
				problems = append(problems, fmt.Sprintf("webhook endpoint %s: … %d more events never delivered", ep.Name, len(missing)-5))
				break
			}
			problems = append(problems, fmt.Sprintf("webhook endpoint %s: event %s never delivered within %s", ep.Name, id, wait))
		}
		problems = append(problems, judgeWebhooks(ep, want, hist)...)
	}
	return problems, nil
}

// missingWebhooks are the ids of want no receipt has, sorted.
func missingWebhooks(got []WebhookReceipt, want map[string][]byte) []string {
	seen := make(map[string]bool, len(got))
	for _, g := range got {
		seen[g.ID] = true
	}
	var out []string
	for id := range want {
		if !seen[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// judgeWebhooks checks the endpoint's receipts of the activity's orders:
// signature, body, version order.
func judgeWebhooks(ep WebhookEndpoint, want map[string][]byte, hist map[string]*order.OrderHistory) []string {
	var problems []string
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("webhook endpoint %s: ", ep.Name)+fmt.Sprintf(format, args...))
	}
	last := map[string]int{}
	for _, g := range ep.Receipts() {
		no, v, err := webhook.ParseMessageID(g.ID)
		if err != nil || hist[no] == nil {
			continue // another activity's
		}
		data, ok := want[g.ID]
		if !ok {
			bad("webhook %s: no such event in the outbox", g.ID)
			continue
		}
		sec, err := strconv.ParseInt(g.Timestamp, 10, 64)
		if err != nil || !hmac.Equal([]byte(g.Signature), []byte(ep.Secret.Sign(g.ID, time.Unix(sec, 0), g.Body))) {
			bad("webhook %s: signature %q does not verify (webhook-timestamp %q)", g.ID, g.Signature, g.Timestamp)
		}
		var m struct {
			Type      string          `json:"type"`
			Timestamp time.Time       `json:"timestamp"`
			Data      json.RawMessage `json:"data"`
		}
		var st event.OrderStatus
		if err := json.Unmarshal(g.Body, &m); err != nil || json.Unmarshal(data, &st) != nil ||
			!bytes.Equal(m.Data, data) || m.Type != "order."+strings.ToLower(st.Status) || !m.Timestamp.Equal(st.At) {
			bad("webhook %s: body %.300s, want type order.%s, timestamp %s and data %s", g.ID, g.Body,
				strings.ToLower(st.Status), st.At.Format(time.RFC3339Nano), data)
		}
		switch {
		case v == last[no]: // a duplicate of the latest (at least once)
		case v < last[no]:
			bad("webhook %s: version %d of %s accepted after version %d", g.ID, v, no, last[no])
		case v > last[no]+1:
			bad("webhook %s: version %d of %s accepted before version %d", g.ID, v, no, last[no]+1)
			last[no] = v
		default:
			last[no] = v
		}
	}
	return problems
}
