package invariant

import (
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/event"
	"orderpipe/pkg/order"
)

// TestAuditToleratesOnlyWhatRetentionDeleted: an order's first versions
// missing from orders.status are no violation when its partition's start
// was deleted after they were published, and are one otherwise; a version
// missing after one the topic still holds is always one.
func TestAuditToleratesOnlyWhatRetentionDeleted(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	closed := func(no string, v1, v2 *time.Time) *order.OrderHistory {
		return &order.OrderHistory{OrderNo: no, Want: []string{"UNPAID", "CLOSED CANCELLED"}, Rows: []order.StatusEvent{
			{OrderNo: no, Version: 1, Status: "UNPAID", PublishedAt: v1},
			{OrderNo: no, Version: 2, Status: "CLOSED", Reason: "CANCELLED", PublishedAt: v2}}}
	}
	v2 := func(no string) []seen {
		return []seen{{OrderStatus: event.OrderStatus{OrderNo: no, Version: 2, Status: "CLOSED", Reason: "CANCELLED"}}}
	}
	const old, late = "o-old", "o-late"
	// Partition 0 (of one) holds messages from t0+10s on.
	read := topicRead{partitions: []int{0}, retainedFrom: map[int]time.Time{0: t0.Add(10 * time.Second)}}
	hist := map[string]*order.OrderHistory{
		old:  closed(old, at(0), at(time.Minute)),              // v1 before the retained start, v2 still there
		late: closed(late, at(time.Minute), at(2*time.Minute)), // v1 after it: it must be there
	}
	problems := check(hist, map[string][]seen{old: v2(old), late: v2(late)}, read.expired)
	if len(problems) != 1 || !strings.Contains(problems[0], late) {
		t.Errorf("problems %q, want one, about %s", problems, late)
	}

	// The same topic, never truncated: both orders' v1 are missing.
	whole := topicRead{partitions: []int{0}, retainedFrom: map[int]time.Time{}}
	if problems := check(hist, map[string][]seen{old: v2(old), late: v2(late)}, whole.expired); len(problems) != 2 {
		t.Errorf("an untruncated topic: problems %q, want two", problems)
	}
	// Everything expired, v2 as well: nothing missing.
	gone := topicRead{partitions: []int{0}, retainedFrom: map[int]time.Time{0: t0.Add(time.Hour)}}
	if problems := check(hist, map[string][]seen{}, gone.expired); len(problems) != 0 {
		t.Errorf("a topic retention emptied: problems %q, want none", problems)
	}
}

// TestExpiredUsesTheRelaysPartition: only the partition the relay's key
// hash puts an orderNo in decides whether its events may have expired.
func TestExpiredUsesTheRelaysPartition(t *testing.T) {
	t.Parallel()
	parts := []int{0, 1, 2, 3}
	const no = "1796316609075-1-mx7sj2bc59c90bcc7e21"
	p := (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(no)}, parts...)
	from := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	own := topicRead{partitions: parts, retainedFrom: map[int]time.Time{p: from}}
	other := topicRead{partitions: parts, retainedFrom: map[int]time.Time{(p + 1) % 4: from}}
	if !own.expired(no, from.Add(-time.Second)) {
		t.Error("published before its own truncated partition's first message: not expired")
	}
	if own.expired(no, from.Add(expiredSlack+time.Second)) {
		t.Error("published after its partition's first retained message: expired")
	}
	if other.expired(no, from.Add(-time.Second)) {
		t.Error("another partition truncated: expired")
	}
}
