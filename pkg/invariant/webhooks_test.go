package invariant

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/webhook"
)

// TestJudgeWebhooks: an endpoint's receipts pass when each order's events
// came signed, with the contract's body, in version order (a duplicate of
// the latest aside), and each way of breaking that is named.
func TestJudgeWebhooks(t *testing.T) {
	key, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC)
	want := map[string][]byte{}
	hist := map[string]*order.OrderHistory{}
	bodies := map[string][]byte{}
	for _, ev := range []struct {
		no     string
		v      int
		status string
	}{{"a", 1, "UNPAID"}, {"a", 2, "PAID"}, {"b", 1, "UNPAID"}, {"b", 2, "CLOSED"}} {
		st := event.OrderStatus{OrderNo: ev.no, Status: ev.status, Version: ev.v, At: at.Add(time.Duration(ev.v) * time.Second)}
		id := webhook.MessageID(ev.no, ev.v)
		want[id] = event.StatusMessage(st).Value
		hist[ev.no] = &order.OrderHistory{OrderNo: ev.no}
		bodies[id], _ = json.Marshal(map[string]any{"type": "order." + strings.ToLower(ev.status), "timestamp": st.At,
			"data": json.RawMessage(want[id])})
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	receipt := func(id string) WebhookReceipt {
		return WebhookReceipt{ID: id, Timestamp: ts, Signature: key.Sign(id, at, bodies[id]), Body: bodies[id]}
	}
	for _, c := range []struct {
		name     string
		receipts []WebhookReceipt
		want     []string // a word of each problem, in order
	}{
		{"in order", []WebhookReceipt{receipt("a.1"), receipt("b.1"), receipt("a.2"), receipt("b.2")}, nil},
		{"a duplicate of the latest", []WebhookReceipt{receipt("a.1"), receipt("a.1"), receipt("a.2"), receipt("a.2")}, nil},
		{"another activity's", []WebhookReceipt{receipt("a.1"), {ID: "z.1"}}, nil},
		{"an earlier version after a later", []WebhookReceipt{receipt("a.1"), receipt("a.2"), receipt("a.1")}, []string{"accepted after"}},
		{"a version skipped", []WebhookReceipt{receipt("a.2"), receipt("a.1")}, []string{"accepted before", "accepted after"}},
		{"a forged signature", []WebhookReceipt{func() WebhookReceipt { r := receipt("a.1"); r.Signature = "v1,AAAA"; return r }()}, []string{"signature"}},
		{"another body", []WebhookReceipt{func() WebhookReceipt {
			r := receipt("a.1")
			r.Body = bodies["a.2"]
			r.Signature = key.Sign(r.ID, at, r.Body)
			return r
		}()}, []string{"body"}},
		{"an event the outbox does not hold", []WebhookReceipt{receipt("a.1"), {ID: "a.3", Timestamp: ts}}, []string{"no such event"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ep := WebhookEndpoint{Name: "e", Secret: key, Receipts: func() []WebhookReceipt { return c.receipts }}
			got := judgeWebhooks(ep, want, hist)
			if len(got) != len(c.want) {
				t.Fatalf("problems %q, want one naming each of %q", got, c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d is %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
	if m := missingWebhooks([]WebhookReceipt{receipt("a.1"), receipt("b.2")}, want); !slices.Equal(m, []string{"a.2", "b.1"}) {
		t.Errorf("missing %v, want [a.2 b.1]", m)
	}
}
