// Package topic reads what a Kafka topic holds: each partition's first and
// next offsets, and its records between two offsets, outside any consumer
// group. It serves the tools and checks that look at a topic as it stands
// (the dead letters, `orderpipe events`, the I7 audit of orders.status). It
// never writes to a topic and never commits an offset, and it knows nothing
// of what the records mean.
package topic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"
)

// Reader reads one topic.
type Reader struct {
	Client *kafka.Client
	Topic  string
}

// Bounds are a partition's offsets: its first and one past its last.
type Bounds struct {
	Partition   int
	First, Next int64
}

// Record is one message of the topic, where it is and what it holds.
type Record struct {
	Partition int
	Offset    int64
	Time      time.Time
	Key       []byte
	Value     []byte
	Headers   []kafka.Header
}

// Where is the record's place as "<partition>:<offset>".
func (r Record) Where() string { return fmt.Sprintf("%d:%d", r.Partition, r.Offset) }

// Header is the value of the record's first header named key ("" when it
// has none).
func (r Record) Header(key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Partitions lists every partition of the topic with its offsets, in
// partition order.
func (r Reader) Partitions(ctx context.Context) ([]Bounds, error) {
	ids, err := r.partitionIDs(ctx)
	if err != nil {
		return nil, err
	}
	var reqs []kafka.OffsetRequest
	for _, id := range ids {
		reqs = append(reqs, kafka.FirstOffsetOf(id), kafka.LastOffsetOf(id))
	}
	lo, err := r.Client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{r.Topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("listing offsets of %s: %w", r.Topic, err)
	}
	var out []Bounds
	for _, p := range lo.Topics[r.Topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("listing offsets of %s/%d: %w", r.Topic, p.Partition, p.Error)
		}
		out = append(out, Bounds{Partition: p.Partition, First: p.FirstOffset, Next: p.LastOffset})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out, nil
}

// partitionIDs reads the topic's partitions from the metadata, so a topic
// that does not exist is named as such, not as a partition without offsets.
func (r Reader) partitionIDs(ctx context.Context) ([]int, error) {
	md, err := r.Client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{r.Topic}})
	if err != nil {
		return nil, fmt.Errorf("reading metadata of %s: %w", r.Topic, err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Name != r.Topic {
		return nil, fmt.Errorf("topic %s missing from metadata", r.Topic)
	}
	if err := md.Topics[0].Error; err != nil {
		return nil, fmt.Errorf("topic %s: %w", r.Topic, err)
	}
	var ids []int
	for _, p := range md.Topics[0].Partitions {
		ids = append(ids, p.ID)
	}
	return ids, nil
}

// Scan calls fn for every record of the given ranges, in offset order per
// partition, partitions in the order given. An error of fn ends the scan
// and is returned as is.
func (r Reader) Scan(ctx context.Context, ranges []Bounds, fn func(Record) error) error {
	for _, b := range ranges {
		if err := r.scan(ctx, b, fn); err != nil {
			return err
		}
	}
	return nil
}

// fetchMaxBytes bounds one fetch: big enough for several of the largest
// messages the pipeline writes (a dead letter is at most 64 KiB of value,
// 1 KiB of key and 16 KiB of headers).
const fetchMaxBytes = 4 << 20

// scan reads one range fetch by fetch until it reaches b.Next or the end of
// the log.
func (r Reader) scan(ctx context.Context, b Bounds, fn func(Record) error) error {
	for off := b.First; off < b.Next; {
		res, err := r.fetch(ctx, b.Partition, off)
		if err != nil {
			return err
		}
		if res == nil {
			return nil
		}
		next, done, err := r.deliver(res, b, off, fn)
		if err != nil || done {
			return err
		}
		if next == off {
			// Nothing at or after off below the high watermark: done.
			if res.HighWatermark <= off {
				return nil
			}
			// Offsets without records (compaction, transaction markers).
			next++
		}
		off = next
	}
	return nil
}

// fetch reads what the partition holds from off; nil when off is outside
// the log (before its start or past its end: nothing there).
func (r Reader) fetch(ctx context.Context, partition int, off int64) (*kafka.FetchResponse, error) {
	res, err := r.Client.Fetch(ctx, &kafka.FetchRequest{Topic: r.Topic, Partition: partition, Offset: off,
		MinBytes: 1, MaxBytes: fetchMaxBytes, MaxWait: 100 * time.Millisecond})
	if err != nil {
		return nil, fmt.Errorf("reading %s/%d at %d: %w", r.Topic, partition, off, err)
	}
	if errors.Is(res.Error, kafka.OffsetOutOfRange) {
		return nil, nil
	}
	if res.Error != nil {
		return nil, fmt.Errorf("reading %s/%d at %d: %w", r.Topic, partition, off, res.Error)
	}
	return res, nil
}

// deliver calls fn for each record of one fetch from off up to b.Next. It
// returns the offset after the last record delivered (off when none was)
// and whether b.Next was reached.
func (r Reader) deliver(res *kafka.FetchResponse, b Bounds, off int64, fn func(Record) error) (next int64, done bool, err error) {
	next = off
	for {
		rec, err := res.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return next, false, nil
		}
		if err != nil {
			return next, false, fmt.Errorf("reading %s/%d at %d: %w", r.Topic, b.Partition, next, err)
		}
		// A fetch may start at the batch holding off, before it.
		if rec.Offset < next {
			continue
		}
		if rec.Offset >= b.Next {
			return next, true, nil
		}
		record, err := recordOf(b.Partition, rec)
		if err != nil {
			return next, false, err
		}
		next = rec.Offset + 1
		if err := fn(record); err != nil {
			return next, false, err
		}
	}
}

func recordOf(partition int, rec *kafka.Record) (Record, error) {
	key, err := readBytes(rec.Key)
	if err != nil {
		return Record{}, err
	}
	value, err := readBytes(rec.Value)
	if err != nil {
		return Record{}, err
	}
	return Record{Partition: partition, Offset: rec.Offset, Time: rec.Time, Key: key, Value: value, Headers: rec.Headers}, nil
}

func readBytes(b kafka.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	out, err := kafka.ReadAll(b)
	if err != nil {
		return nil, fmt.Errorf("reading a record: %w", err)
	}
	return out, nil
}
