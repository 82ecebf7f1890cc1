package relay

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/dlq"
	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
)

// Audit checks I7 for one activity, once the outbox is drained
// (WaitPublished): every state an order of the activity reached (UNPAID,
// PAID, CLOSED, REJECTED, read from its state in Postgres) has its outbox
// row, version 1 first and one more per change, published; the topic holds
// each of them at least once, keyed by orderNo with the schema header, in
// version order per orderNo (a duplicate may repeat a version already seen,
// never skip one); and nothing on the topic names a change Postgres did not
// commit. It returns the violations, each starting with "I7:". The test
// harness, the load tool's audit and the chaos suite's checker all call it.
func Audit(ctx context.Context, orders *order.Store, client *kafka.Client, topic string, activityID int64) ([]string, error) {
	hist, err := orders.StatusHistories(ctx, activityID)
	if err != nil {
		return nil, err
	}
	// A broker just restarted may fail a read (a connection it dropped):
	// that is not a verdict, so the read is tried again for a while.
	var published map[string][]seen
	deadline := time.Now().Add(30 * time.Second)
	for {
		if published, err = readTopic(ctx, client, topic, activityID); err == nil || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, err
	}
	return check(hist, published), nil
}

// seen is one status event read from the topic.
type seen struct {
	event.OrderStatus
	where string // partition:offset
	err   string // what is wrong with the message itself
}

// readTopic reads every event of the activity on the topic, in offset
// order per partition (one order's events are all in one partition).
func readTopic(ctx context.Context, client *kafka.Client, topic string, activityID int64) (map[string][]seen, error) {
	r := dlq.Reader{Client: client, Topic: topic}
	bounds, err := r.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]seen{}
	err = r.Scan(ctx, bounds, func(l dlq.Letter) error {
		st, derr := event.DecodeStatus(l.Value)
		s := seen{OrderStatus: st, where: l.Position.String()}
		switch {
		case derr != nil:
			s.err = derr.Error()
		case string(l.Key) != st.OrderNo:
			s.err = fmt.Sprintf("key %q is not its orderNo", l.Key)
		case header(l, event.HeaderSchema) != event.StatusSchemaV1:
			s.err = fmt.Sprintf("schema header %q", header(l, event.HeaderSchema))
		}
		if derr == nil && st.ActivityID != activityID {
			return nil
		}
		out[st.OrderNo] = append(out[st.OrderNo], s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", topic, err)
	}
	return out, nil
}

func header(l dlq.Letter, key string) string {
	for _, h := range l.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

// check compares the histories with what the topic holds.
func check(hist map[string]*order.OrderHistory, published map[string][]seen) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, "I7: "+fmt.Sprintf(format, args...)) }
	nos := make([]string, 0, len(hist))
	for no := range hist {
		nos = append(nos, no)
	}
	for no := range published {
		if hist[no] == nil {
			nos = append(nos, no)
		}
	}
	sort.Strings(nos)
	for _, no := range nos {
		h := hist[no]
		if h == nil {
			h = &order.OrderHistory{OrderNo: no}
		}
		// The outbox: exactly the history, versions 1..n, all published.
		var rows []string
		for i, r := range h.Rows {
			if r.Version != i+1 {
				bad("%s: outbox versions %v, want 1..%d", no, versions(h.Rows), len(h.Want))
				break
			}
			rows = append(rows, statusOf(r.Status, r.Reason))
			if r.PublishedAt == nil {
				bad("%s: version %d (%s) was never published", no, r.Version, rows[i])
			}
		}
		if fmt.Sprint(rows) != fmt.Sprint(h.Want) {
			bad("%s: outbox holds %q, but the order's history is %q", no, rows, h.Want)
		}
		// The topic: every version of the history, in order, nothing else.
		max := 0
		for _, s := range published[no] {
			if s.err != "" {
				bad("%s: message at %s: %s", no, s.where, s.err)
				continue
			}
			got := statusOf(s.Status, s.Reason)
			switch {
			case s.Version < 1 || s.Version > len(h.Want):
				bad("%s: published version %d (%s) at %s, which Postgres never committed (history %q)", no, s.Version, got, s.where, h.Want)
				continue
			case got != h.Want[s.Version-1]:
				bad("%s: published version %d as %s at %s, but it is %s", no, s.Version, got, s.where, h.Want[s.Version-1])
			case s.Version > max+1:
				bad("%s: published version %d at %s before version %d", no, s.Version, s.where, max+1)
			}
			if s.Version > max {
				max = s.Version
			}
		}
		if max < len(h.Want) {
			bad("%s: %d of its %d events published (history %q)", no, max, len(h.Want), h.Want)
		}
	}
	return problems
}

func statusOf(status, reason string) string {
	if reason == "" {
		return status
	}
	return status + " " + reason
}

func versions(rows []order.StatusEvent) []int {
	out := make([]int, len(rows))
	for i, r := range rows {
		out[i] = r.Version
	}
	return out
}

// WaitPublished waits until the outbox holds no unpublished event, or
// within has passed (then it returns an error saying how many are left).
func WaitPublished(ctx context.Context, orders *order.Store, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n, oldest, err := orders.EventBacklog(ctx)
		if err == nil && n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("waiting for the status outbox to drain: %w", err)
			}
			return fmt.Errorf("the status outbox still holds %d unpublished events after %s (oldest %s)", n, within, oldest.Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
