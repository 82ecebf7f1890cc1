package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// lagTimeout bounds one poll of the group's lag (three broker requests).
const lagTimeout = 5 * time.Second

// lagLogEvery is how often a failing lag poll is logged at most.
const lagLogEvery = time.Minute

// GroupLag is how many messages of topic the consumer group has not
// committed yet, summed over every partition of the topic: its high
// watermark minus the group's committed offset. A partition where the group
// has committed nothing (or an offset retention has already deleted) counts
// from its log start, where a new member of the group starts reading
// (StartOffset: FirstOffset). It asks the broker only; a worker stuck on a
// batch, or not running at all, does not change the answer.
func GroupLag(ctx context.Context, c *kafka.Client, topic, group string) (int64, error) {
	offs, err := GroupOffsets(ctx, c, topic, group)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, o := range offs {
		sum += partitionLag(o.LogStart, o.HighWatermark, o.Committed)
	}
	return sum, nil
}

// PartitionOffsets are one partition's offsets and the group's position.
type PartitionOffsets struct {
	LogStart, HighWatermark int64
	Committed               int64 // -1: nothing committed
}

// Consumed is where the group will read next: its committed offset, or the
// log start when it committed nothing or less.
func (o PartitionOffsets) Consumed() int64 { return max(o.Committed, o.LogStart) }

// GroupOffsets reads, for every partition of topic, its log start and high
// watermark and the group's committed offset, from the broker.
func GroupOffsets(ctx context.Context, c *kafka.Client, topic, group string) (map[int]PartitionOffsets, error) {
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("reading metadata of %s: %w", topic, err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Name != topic {
		return nil, fmt.Errorf("topic %s missing from metadata", topic)
	}
	if err := md.Topics[0].Error; err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	var parts []int
	var reqs []kafka.OffsetRequest
	for _, p := range md.Topics[0].Partitions {
		parts = append(parts, p.ID)
		reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions", topic)
	}
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("listing offsets of %s: %w", topic, err)
	}
	first, last := map[int]int64{}, map[int]int64{}
	for _, p := range lo.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("listing offsets of %s/%d: %w", topic, p.Partition, p.Error)
		}
		first[p.Partition], last[p.Partition] = p.FirstOffset, p.LastOffset
	}
	of, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, fmt.Errorf("fetching offsets of group %s: %w", group, err)
	}
	committed := map[int]int64{}
	switch {
	case errors.Is(of.Error, kafka.GroupIdNotFound):
		// A group that never joined (some brokers answer so, others with
		// no offsets): nothing committed anywhere.
	case of.Error != nil:
		return nil, fmt.Errorf("fetching offsets of group %s: %w", group, of.Error)
	default:
		for _, p := range of.Topics[topic] {
			if p.Error != nil {
				return nil, fmt.Errorf("fetching offsets of group %s on %s/%d: %w", group, topic, p.Partition, p.Error)
			}
			committed[p.Partition] = p.CommittedOffset
		}
	}
	out := make(map[int]PartitionOffsets, len(parts))
	for _, p := range parts {
		f, okF := first[p]
		l, okL := last[p]
		if !okF || !okL || f < 0 || l < 0 {
			return nil, fmt.Errorf("no offsets for %s/%d", topic, p)
		}
		c, ok := committed[p]
		if !ok {
			c = -1
		}
		out[p] = PartitionOffsets{LogStart: f, HighWatermark: l, Committed: c}
	}
	return out, nil
}

// partitionLag is one partition's lag: from the committed offset, or from
// the log start when nothing (-1) or less than the log start is committed,
// to the high watermark; never negative.
func partitionLag(logStart, highWatermark, committed int64) int64 {
	from := max(committed, logStart)
	return max(highWatermark-from, 0)
}

// lagLoop sets the consumer-lag gauge from the broker every LagInterval,
// apart from the batch loop: it keeps moving while a batch is retried (a
// Postgres outage) and never holds one up. A failed poll leaves the gauge
// as it was and is logged at most every lagLogEvery.
func (w *Worker) lagLoop(ctx context.Context) {
	tr := w.cfg.Security.Transport(lagTimeout)
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(w.cfg.Brokers...), Transport: tr}
	t := time.NewTicker(w.cfg.LagInterval)
	defer t.Stop()
	var logged time.Time
	failed := 0
	for {
		pctx, cancel := context.WithTimeout(ctx, lagTimeout)
		lag, err := GroupLag(pctx, c, w.cfg.Topic, w.cfg.GroupID)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			w.deps.Metrics.ConsumerLag.Set(float64(lag))
			failed = 0
		default:
			failed++
			// One failed read is retried at the next interval (a fresh
			// topic's leader still moving answers NOT_LEADER once); a
			// second in a row is worth a warning.
			if now := time.Now(); failed >= 2 && now.Sub(logged) >= lagLogEvery {
				w.deps.Log.Warn("reading consumer lag", "err", err, "consecutive_failures", failed)
				logged = now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
