package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DLQReplay is the record of one dead letter replayed to the order topic
// (dlq_replays): a letter is replayed at most once per record.
type DLQReplay struct {
	DLQTopic   string
	Partition  int
	Offset     int64
	RequestID  string
	OrderNo    string
	Topic      string
	ReplayedAt time.Time
}

// ReplayClaim is a replay record inserted and not yet committed: a
// concurrent claim of the same letter waits on it. Commit it once the
// letter is published; Rollback it otherwise (a no-op after Commit).
type ReplayClaim struct {
	tx pgx.Tx
	// At is the record's replay time, as it will commit.
	At time.Time
}

// Commit makes the replay record durable.
func (c *ReplayClaim) Commit(ctx context.Context) error { return c.tx.Commit(ctx) }

// Rollback drops the uncommitted record.
func (c *ReplayClaim) Rollback(ctx context.Context) { c.tx.Rollback(ctx) } //nolint:errcheck // a no-op after Commit

// ClaimReplay inserts r's replay record, uncommitted. When the letter was
// replayed before (or just now by a concurrent claim, whose commit this one
// waited for), it returns no claim and the earlier record instead.
func (s *Store) ClaimReplay(ctx context.Context, r DLQReplay) (*ReplayClaim, *DLQReplay, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	c := &ReplayClaim{tx: tx}
	err = tx.QueryRow(ctx, `INSERT INTO dlq_replays (dlq_topic, dlq_partition, dlq_offset, request_id, order_no, topic)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING replayed_at`,
		r.DLQTopic, r.Partition, r.Offset, r.RequestID, r.OrderNo, r.Topic).Scan(&c.At)
	if errors.Is(err, pgx.ErrNoRows) {
		c.Rollback(ctx)
		prior, err := s.ReplayOf(ctx, r.DLQTopic, r.Partition, r.Offset)
		if err != nil {
			return nil, nil, err
		}
		return nil, &prior, nil
	}
	if err != nil {
		c.Rollback(ctx)
		return nil, nil, err
	}
	return c, nil, nil
}

// ReplayOf is the replay record of the dead letter at partition:offset.
func (s *Store) ReplayOf(ctx context.Context, dlqTopic string, partition int, offset int64) (DLQReplay, error) {
	rp := DLQReplay{DLQTopic: dlqTopic, Partition: partition, Offset: offset}
	err := s.pool.QueryRow(ctx, `SELECT request_id, order_no, topic, replayed_at FROM dlq_replays
		WHERE dlq_topic = $1 AND dlq_partition = $2 AND dlq_offset = $3`, dlqTopic, partition, offset).
		Scan(&rp.RequestID, &rp.OrderNo, &rp.Topic, &rp.ReplayedAt)
	if err != nil {
		return DLQReplay{}, fmt.Errorf("reading the replay of %d:%d: %w", partition, offset, err)
	}
	return rp, nil
}

// Replays lists every replay record of the dead-letter topic.
func (s *Store) Replays(ctx context.Context, dlqTopic string) ([]DLQReplay, error) {
	rows, err := s.pool.Query(ctx, `SELECT dlq_partition, dlq_offset, request_id, order_no, topic, replayed_at
		FROM dlq_replays WHERE dlq_topic = $1`, dlqTopic)
	if err != nil {
		return nil, fmt.Errorf("reading replays of %s: %w", dlqTopic, err)
	}
	var out []DLQReplay
	rp := DLQReplay{DLQTopic: dlqTopic}
	_, err = pgx.ForEachRow(rows, []any{&rp.Partition, &rp.Offset, &rp.RequestID, &rp.OrderNo, &rp.Topic, &rp.ReplayedAt}, func() error {
		out = append(out, rp)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading replays of %s: %w", dlqTopic, err)
	}
	return out, nil
}
