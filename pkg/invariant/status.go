package invariant

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
	"orderpipe/pkg/topic"
)

// AuditStatus checks I7 for one activity, once the outbox is drained
// (WaitPublished): every state an order of the activity reached (UNPAID,
// PAID, CLOSED, REJECTED, read from its state in Postgres) has its outbox
// row, version 1 first and one more per change, published; the topic holds
// each of them at least once, keyed by orderNo with the schema header, in
// version order per orderNo (a duplicate may repeat a version already seen,
// never skip one); and nothing on the topic names a change Postgres did not
// commit. It returns the violations, each starting with "I7:". The test
// harness, the load tool's audit and the chaos suite's checker all call it.
func AuditStatus(ctx context.Context, orders *order.Store, client *kafka.Client, topicName string, activityID int64) ([]string, error) {
	hist, err := orders.StatusHistories(ctx, activityID)
	if err != nil {
		return nil, err
	}
	// A broker just restarted may fail a read (a connection it dropped):
	// that is not a verdict, so the read is tried again for a while.
	var published topicRead
	deadline := time.Now().Add(30 * time.Second)
	for {
		if published, err = readTopic(ctx, client, topicName, activityID); err == nil || time.Now().After(deadline) {
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
	return check(hist, published.events, published.expired), nil
}

// seen is one status event read from the topic.
type seen struct {
	event.OrderStatus
	where string // partition:offset
	err   string // what is wrong with the message itself
}

// topicRead is what readTopic found.
type topicRead struct {
	events map[string][]seen // by orderNo
	// retainedFrom is, for each partition the broker has deleted the start
	// of (retention), when its first retained message was written; zero for
	// a partition that still holds everything written to it.
	retainedFrom map[int]time.Time
	partitions   []int
}

// expiredSlack is how long after a partition's first retained message an
// event the outbox marked published may still have been written before it:
// the relay marks a batch once its write is acknowledged.
const expiredSlack = 2 * time.Second

// expired says whether the event of orderNo that the outbox marked
// published at publishedAt may have been deleted by the topic's retention:
// its partition (the relay's key hash) no longer holds its start, and the
// event was published before the first message it still holds.
func (t topicRead) expired(orderNo string, publishedAt time.Time) bool {
	if len(t.partitions) == 0 {
		return false
	}
	p := (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(orderNo)}, t.partitions...)
	from, truncated := t.retainedFrom[p]
	return truncated && publishedAt.Before(from.Add(expiredSlack))
}

// readTopic reads every event of the activity on the topic, in offset
// order per partition (one order's events are all in one partition).
func readTopic(ctx context.Context, client *kafka.Client, topicName string, activityID int64) (topicRead, error) {
	r := topic.Reader{Client: client, Topic: topicName}
	bounds, err := r.Partitions(ctx)
	if err != nil {
		return topicRead{}, err
	}
	out := topicRead{events: map[string][]seen{}, retainedFrom: map[int]time.Time{}}
	started := time.Now()
	for _, b := range bounds {
		out.partitions = append(out.partitions, b.Partition)
		if b.First > 0 {
			// A partition retention has emptied holds nothing from before now.
			out.retainedFrom[b.Partition] = started
		}
	}
	sort.Ints(out.partitions)
	firstOf := map[int]bool{}
	err = r.Scan(ctx, bounds, func(rec topic.Record) error {
		if _, truncated := out.retainedFrom[rec.Partition]; truncated && !firstOf[rec.Partition] {
			firstOf[rec.Partition] = true
			out.retainedFrom[rec.Partition] = rec.Time.UTC()
		}
		st, derr := event.DecodeStatus(rec.Value)
		s := seen{OrderStatus: st, where: rec.Where()}
		switch {
		case derr != nil:
			s.err = derr.Error()
		case string(rec.Key) != st.OrderNo:
			s.err = fmt.Sprintf("key %q is not its orderNo", rec.Key)
		case rec.Header(event.HeaderSchema) != event.StatusSchemaV1:
			s.err = fmt.Sprintf("schema header %q", rec.Header(event.HeaderSchema))
		}
		if derr == nil && st.ActivityID != activityID {
			return nil
		}
		out.events[st.OrderNo] = append(out.events[st.OrderNo], s)
		return nil
	})
	if err != nil {
		return topicRead{}, fmt.Errorf("reading %s: %w", topicName, err)
	}
	return out, nil
}

// check compares the histories with what the topic holds. The first
// versions of an order that the topic no longer holds are not missing when
// expired says retention may have deleted them (a topic keeps a bounded
// log; the outbox recorded their publication).
func check(hist map[string]*order.OrderHistory, published map[string][]seen, expired func(orderNo string, publishedAt time.Time) bool) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, "I7: "+fmt.Sprintf(format, args...)) }
	for _, no := range orderNos(hist, published) {
		h := hist[no]
		if h == nil { // on the topic, unknown to Postgres
			h = &order.OrderHistory{OrderNo: no}
		}
		checkOutbox(no, h, bad)
		checkTopic(no, h, published[no], expired, bad)
	}
	return problems
}

// orderNos is every order named by Postgres or by the topic, sorted.
func orderNos(hist map[string]*order.OrderHistory, published map[string][]seen) []string {
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
	return nos
}

// checkOutbox: the outbox holds exactly the history, versions 1..n, all
// published.
func checkOutbox(no string, h *order.OrderHistory, bad func(format string, args ...any)) {
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
}

// checkTopic: the topic holds every version of the history, in order, and
// nothing else.
func checkTopic(no string, h *order.OrderHistory, onTopic []seen, expired func(orderNo string, publishedAt time.Time) bool, bad func(format string, args ...any)) {
	highest := expiredVersions(no, h, onTopic, expired)
	for _, s := range onTopic {
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
		case s.Version > highest+1:
			bad("%s: published version %d at %s before version %d", no, s.Version, s.where, highest+1)
		}
		if s.Version > highest {
			highest = s.Version
		}
	}
	if highest < len(h.Want) {
		bad("%s: %d of its %d events published (history %q)", no, highest, len(h.Want), h.Want)
	}
}

// expiredVersions is how many of the order's first versions count as seen
// though the topic does not hold them: published, and retention may have
// deleted them since (expired).
func expiredVersions(no string, h *order.OrderHistory, onTopic []seen, expired func(orderNo string, publishedAt time.Time) bool) int {
	held := map[int]bool{}
	for _, s := range onTopic {
		held[s.Version] = true
	}
	n := 0
	for _, r := range h.Rows {
		if held[r.Version] || r.Version != n+1 || r.PublishedAt == nil || expired == nil || !expired(no, *r.PublishedAt) {
			break
		}
		n = r.Version
	}
	return n
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
