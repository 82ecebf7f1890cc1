-- Why a CLOSED order was closed: PAYMENT_TIMEOUT (the closer) or CANCELLED
-- (the buyer). Orders closed before this column existed were all closed by
-- the closer.
ALTER TABLE orders ADD COLUMN close_reason text CHECK (close_reason IN ('PAYMENT_TIMEOUT', 'CANCELLED'));
UPDATE orders SET close_reason = 'PAYMENT_TIMEOUT' WHERE status = 'CLOSED';
ALTER TABLE orders ADD CONSTRAINT orders_close_reason_when_closed CHECK ((status = 'CLOSED') = (close_reason IS NOT NULL));

-- The version of the order's latest orders.status event: 1 when the worker
-- creates it, one more with each change. Kept on the row (not taken from
-- order_events, whose published rows are pruned) so a change after the
-- retention still gets the next version. The row lock of the change orders
-- the versions of one order.
ALTER TABLE orders ADD COLUMN event_version integer NOT NULL DEFAULT 1;

-- Outbox of orders.status: one row per state change of an order, written in
-- the transaction that changes it; the relay publishes the rows of one order
-- in version order and marks them published; published rows are pruned
-- after STATUS_RETENTION.
CREATE TABLE order_events (
    id           bigserial   PRIMARY KEY,
    order_no     text        NOT NULL,
    version      integer     NOT NULL CHECK (version >= 1),
    status       text        NOT NULL CHECK (status IN ('UNPAID', 'PAID', 'CLOSED', 'REJECTED')),
    reason       text,
    payload      jsonb       NOT NULL,  -- the orders.status.v1 value
    traceparent  text,                  -- W3C trace context the message continues
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    UNIQUE (order_no, version),
    CHECK ((status IN ('REJECTED', 'CLOSED')) = (reason IS NOT NULL))
);
-- The relay's scan, and the backlog gauge.
CREATE INDEX order_events_unpublished ON order_events (id) WHERE published_at IS NULL;
-- The prune.
CREATE INDEX order_events_published ON order_events (published_at) WHERE published_at IS NOT NULL;
