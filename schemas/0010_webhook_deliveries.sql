-- Webhooks: every orders.status event is also delivered over HTTP to each
-- configured endpoint (WEBHOOK_URLS). The deliverer (worker/delivery) reads the
-- outbox independently of the relay: it copies each committed order_events
-- row into one webhook_deliveries row per endpoint and marks the event
-- queued (webhook_queued_at); the relay's published_at is never touched, so
-- neither waits for the other. Rows that existed before this migration are
-- queued by the first deliverer that runs, like any other.
ALTER TABLE order_events ADD COLUMN webhook_queued_at timestamptz;
-- The deliverer's scan of what it has not queued yet.
CREATE INDEX order_events_unqueued ON order_events (id) WHERE webhook_queued_at IS NULL;

-- One event for one endpoint. Pending while delivered_at and failed_at are
-- both NULL; a pending row is claimed when next_attempt_at has come and no
-- lower version of its order is pending for the same endpoint (an order's
-- events go out in version order per endpoint). A claim moves
-- next_attempt_at to the end of the claim's lease and increments lease_no,
-- which the claim's outcome must still match: a deliverer whose lease ran
-- out cannot overwrite the outcome of the one that took the row over.
CREATE TABLE webhook_deliveries (
    id               bigserial   PRIMARY KEY,
    endpoint         text        NOT NULL,  -- scheme://host/path of the URL: no credentials, no query
    order_no         text        NOT NULL,
    version          integer     NOT NULL CHECK (version >= 1),
    status           text        NOT NULL,
    payload          jsonb       NOT NULL,  -- the orders.status.v1 value (kept here: order_events rows are pruned)
    event_created_at timestamptz NOT NULL,  -- when the change committed its outbox row
    created_at       timestamptz NOT NULL DEFAULT now(),
    retry_until      timestamptz NOT NULL,  -- a failed attempt at or after this gives up
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    attempts         integer     NOT NULL DEFAULT 0,  -- since queued or last replayed
    lease_no         bigint      NOT NULL DEFAULT 0,  -- claims ever made: the fencing token of a claim
    last_status      integer,                 -- HTTP status of the last attempt; NULL: no answer
    last_error       text,
    last_attempt_at  timestamptz,
    delivered_at     timestamptz,
    failed_at        timestamptz,
    replays          integer     NOT NULL DEFAULT 0,
    UNIQUE (endpoint, order_no, version),
    CHECK (delivered_at IS NULL OR failed_at IS NULL)
);
-- The claim: due pending rows of one endpoint.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint, next_attempt_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
-- `orderpipe webhooks list` and the failed gauge.
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (failed_at) WHERE failed_at IS NOT NULL;
-- The prune of delivered rows.
CREATE INDEX webhook_deliveries_delivered ON webhook_deliveries (delivered_at) WHERE delivered_at IS NOT NULL;
