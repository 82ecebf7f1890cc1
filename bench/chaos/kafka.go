package chaos

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// The helpers take the bootstrap list (the kfake broker, or every broker
// of a real cluster, some of which may be down) and use a transport of
// their own each time: kafka-go's default transport is shared and answers
// Metadata from a cache, which after a broker's death names leaders that
// are gone.

// client is a kafka-go client on brokers with a fresh transport; done
// closes its connections.
func client(brokers []string) (c *kafka.Client, done func()) {
	tr := &kafka.Transport{DialTimeout: 2 * time.Second, MetadataTTL: time.Second}
	return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 3 * time.Second, Transport: tr}, tr.CloseIdleConnections
}

// groupLag is how many messages of topic the consumer group has not
// committed yet, over every partition.
func groupLag(ctx context.Context, brokers []string, topic, group string) (int64, error) {
	ends, committed, err := groupOffsets(ctx, brokers, topic, group)
	if err != nil {
		return 0, err
	}
	var lag int64
	for p, end := range ends {
		lag += max(end-committed[p], 0)
	}
	return lag, nil
}

// committedSum is the sum of the group's committed offsets of partitions
// parts (nil: all): it grows while the group consumes them.
func committedSum(ctx context.Context, brokers []string, topic, group string, parts []int) (int64, error) {
	_, committed, err := groupOffsets(ctx, brokers, topic, group)
	var sum int64
	for p, c := range committed {
		if parts == nil || slices.Contains(parts, p) {
			sum += c
		}
	}
	return sum, err
}

// groupOffsets is, per partition of topic, the high watermark and the
// group's committed offset (0 when none).
func groupOffsets(ctx context.Context, brokers []string, topic, group string) (ends, committed map[int]int64, err error) {
	c, done := client(brokers)
	defer done()
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, nil, fmt.Errorf("reading metadata: %w", err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		return nil, nil, fmt.Errorf("topic %s missing from metadata", topic)
	}
	var parts []int
	var reqs []kafka.OffsetRequest
	for _, p := range md.Topics[0].Partitions {
		parts = append(parts, p.ID)
		reqs = append(reqs, kafka.LastOffsetOf(p.ID))
	}
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, nil, fmt.Errorf("listing offsets: %w", err)
	}
	of, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, nil, fmt.Errorf("fetching group offsets: %w", err)
	}
	if of.Error != nil {
		return nil, nil, of.Error
	}
	ends, committed = map[int]int64{}, map[int]int64{}
	for _, p := range lo.Topics[topic] {
		if p.Error != nil {
			return nil, nil, p.Error
		}
		ends[p.Partition] = p.LastOffset
	}
	for _, p := range of.Topics[topic] {
		if p.Error != nil {
			return nil, nil, p.Error
		}
		committed[p.Partition] = max(p.CommittedOffset, 0)
	}
	return ends, committed, nil
}

// produceRaw writes messages as they are, bypassing every codec: how a
// misbehaving producer would.
func produceRaw(ctx context.Context, brokers []string, topic string, msgs ...kafka.Message) error {
	tr := &kafka.Transport{DialTimeout: 2 * time.Second, MetadataTTL: time.Second}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, WriteTimeout: 5 * time.Second, MaxAttempts: 5, Transport: tr}
	defer w.Close()
	return w.WriteMessages(ctx, msgs...)
}

// countDelivered reads topic from the start and counts the messages whose
// value is one of values; it stops once all are found or within passes.
func countDelivered(ctx context.Context, brokers []string, topic string, values [][]byte, within time.Duration) (int, error) {
	c, done := client(brokers)
	defer done()
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, err
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		return 0, fmt.Errorf("topic %s missing from metadata", topic)
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	found := map[int]bool{}
	for _, p := range md.Topics[0].Partitions {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxWait: 100 * time.Millisecond})
		end, err := lastOffset(ctx, c, topic, p.ID)
		if err != nil {
			r.Close()
			return len(found), err
		}
		for off := int64(0); off < end; off++ {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				return len(found), fmt.Errorf("reading %s/%d: %w", topic, p.ID, err)
			}
			for i, v := range values {
				if bytes.Equal(m.Value, v) {
					found[i] = true
				}
			}
			if m.Offset+1 >= end {
				break
			}
		}
		r.Close()
	}
	return len(found), nil
}

func lastOffset(ctx context.Context, c *kafka.Client, topic string, part int) (int64, error) {
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(part)}}})
	if err != nil {
		return 0, err
	}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return 0, p.Error
		}
		return p.LastOffset, nil
	}
	return 0, errors.New("no offsets for partition")
}

// groupState describes the worker group for a report: each partition's lag
// and the member assigned it (as the coordinator sees it), so a partition
// nobody consumes shows.
func groupState(ctx context.Context, brokers []string, topic, group string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, committed, err := groupOffsets(ctx, brokers, topic, group)
	if err != nil {
		return "offsets unknown: " + err.Error()
	}
	owner := map[int]string{}
	c, done := client(brokers)
	defer done()
	var desc string
	if res, err := c.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}}); err != nil {
		desc = "members unknown: " + err.Error()
	} else if len(res.Groups) == 1 {
		g := res.Groups[0]
		desc = fmt.Sprintf("group %s, %d members", g.GroupState, len(g.Members))
		for _, m := range g.Members {
			for _, t := range m.MemberAssignments.Topics {
				for _, p := range t.Partitions {
					owner[p] = m.ClientHost + " " + m.MemberID
				}
			}
		}
	}
	var parts []string
	for p := range ends {
		parts = append(parts, fmt.Sprintf("p%d lag %d (%s)", p, max(ends[p]-committed[p], 0), cmp.Or(owner[p], "unassigned")))
	}
	slices.Sort(parts)
	return desc + ": " + strings.Join(parts, ", ")
}
