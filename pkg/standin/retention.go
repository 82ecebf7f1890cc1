package standin

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"

	"orderpipe/pkg/tick"
)

// Retention bounds what the embedded broker keeps, so a long `make run`
// does not grow without end: kfake keeps every record it is given, and its
// own retention.ms/retention.bytes know nothing of consumer groups (they
// would delete an event the worker has not read).
//
// Every Interval, each topic keeps about Bytes[topic] of its newest records
// (per topic, split evenly over its partitions; measured by kfake's own byte
// count, so the cut is approximate); older ones are deleted — but on a topic
// in Guard, never a record at or above the offset that topic's guarding
// consumer group has committed on that partition, and nothing at all on a
// partition where that group has committed nothing yet (it will start from
// the earliest record). So an event the worker has not decided is never
// deleted, whatever the budget; the budget bounds the history that is
// already in Postgres. A topic without a budget (absent or ≤ 0) keeps
// everything.
type Retention struct {
	Bytes map[string]int64
	// Guard maps a topic to the consumer group whose uncommitted records
	// must stay.
	Guard    map[string]string
	Interval time.Duration
}

// segmentBytes is the embedded broker's segment size when a retention is
// set. kfake frees a partition's storage a whole segment at a time (and
// its in-memory segment grows by doubling), so its 100 MiB default would
// keep up to that much per partition whatever was deleted.
const segmentBytes = 256 << 10

// Trimmed says what one retention pass deleted.
type Trimmed struct {
	Records int64 // records deleted
	// Held is the number of partitions over their budget that kept more
	// because their guarding group had not committed that far.
	Held int
}

// Trim runs one retention pass now.
func (k *Kafka) Trim() (Trimmed, error) {
	var out Trimmed
	var errs []error
	for topic, budget := range k.retention.Bytes {
		if budget > 0 {
			errs = append(errs, k.trimTopic(topic, budget, &out)...)
		}
	}
	return out, errors.Join(errs...)
}

// trimTopic cuts each partition of topic to its even share of budget.
func (k *Kafka) trimTopic(topic string, budget int64, out *Trimmed) []error {
	parts := k.Cluster.PartitionInfos(topic)
	if len(parts) == 0 {
		return nil
	}
	g := k.guardOf(topic)
	perPart := budget / int64(len(parts))
	var errs []error
	for _, p := range parts {
		to, held := g.cut(p, perPart)
		if held {
			out.Held++
		}
		if to <= p.LogStartOffset {
			continue
		}
		err := k.Cluster.DeleteRecords(topic, p.Partition, to)
		switch {
		case err == nil:
			out.Records += to - p.LogStartOffset
		case errors.Is(err, kerr.OffsetOutOfRange), errors.Is(err, kerr.UnknownTopicOrPartition):
			// Deleted or trimmed meanwhile: the next pass sees it.
		default:
			errs = append(errs, err)
		}
	}
	return errs
}

// guard is what a topic's guarding group has committed, per partition.
type guard struct {
	on      bool // the topic has a guarding group
	commits map[int32]kfake.GroupCommit
}

func (k *Kafka) guardOf(topic string) guard {
	group, on := k.retention.Guard[topic]
	g := guard{on: on}
	if on {
		if gi := k.Cluster.GroupInfo(group); gi != nil {
			g.commits = gi.Commits[topic]
		}
	}
	return g
}

// cut is the offset below which p's records may be deleted (at or below
// its log start: none), and whether the guard held records the budget
// would have deleted.
func (g guard) cut(p *kfake.PartitionInfo, perPart int64) (to int64, held bool) {
	records := p.HighWatermark - p.LogStartOffset
	if p.NumBytes <= perPart || records <= 0 {
		return p.LogStartOffset, false
	}
	// The newest records that fit the budget, at the partition's average
	// record size.
	to = p.HighWatermark - perPart*records/p.NumBytes
	if !g.on {
		return to, false
	}
	c, ok := g.commits[p.Partition]
	if !ok || c.Offset < 0 {
		// The group will start from the earliest record: keep them all.
		return p.LogStartOffset, true
	}
	if c.Offset < to {
		return c.Offset, true
	}
	return to, false
}

// retain runs Trim every Interval until ctx ends.
func (k *Kafka) retain(ctx context.Context, onErr func(error)) {
	tick.Every(ctx, k.retention.Interval, func() {
		if _, err := k.Trim(); err != nil && onErr != nil {
			onErr(err)
		}
	})
}
