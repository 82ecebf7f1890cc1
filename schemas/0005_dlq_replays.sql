-- Dead letters `orderpipe dlq replay` published back to the order topic: one
-- row per dead letter (its topic, partition and offset), written in the
-- transaction that holds the row while the event is published, so a dead
-- letter is never published twice, whoever replays it, however often.
CREATE TABLE dlq_replays (
    dlq_topic     text        NOT NULL,
    dlq_partition integer     NOT NULL,
    dlq_offset    bigint      NOT NULL,
    request_id    text        NOT NULL,
    order_no      text        NOT NULL,
    topic         text        NOT NULL,  -- where it was published
    replayed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dlq_topic, dlq_partition, dlq_offset)
);
