-- orderpipe initial schema. Postgres is the source of truth; Redis is a fast,
-- rebuildable projection of item_stock and of the live orders.

CREATE TABLE activities (
    id             bigint      PRIMARY KEY CHECK (id > 0),
    name           text        NOT NULL,
    starts_at      timestamptz NOT NULL,
    ends_at        timestamptz NOT NULL,
    per_user_limit integer     NOT NULL DEFAULT 1 CHECK (per_user_limit BETWEEN 1 AND 100),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at)
);

CREATE TABLE item_stock (
    activity_id   bigint      NOT NULL REFERENCES activities (id),
    item_id       bigint      NOT NULL CHECK (item_id > 0),
    initial_stock bigint      NOT NULL CHECK (initial_stock >= 0),
    stock         bigint      NOT NULL CHECK (stock >= 0),
    version       bigint      NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (activity_id, item_id)
);

CREATE TABLE orders (
    order_no    text        NOT NULL UNIQUE,
    request_id  text        NOT NULL UNIQUE,
    user_id     bigint      NOT NULL,
    activity_id bigint      NOT NULL,
    item_id     bigint      NOT NULL,
    quantity    integer     NOT NULL CHECK (quantity BETWEEN 1 AND 100),
    status      text        NOT NULL DEFAULT 'UNPAID' CHECK (status IN ('UNPAID', 'PAID', 'CLOSED')),
    reserved_at timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    paid_at     timestamptz,
    closed_at   timestamptz,
    -- I6: a row is PAID or CLOSED, never both.
    CHECK (NOT (paid_at IS NOT NULL AND closed_at IS NOT NULL))
);

-- I2 backstop: holds even if Redis loses every key.
CREATE UNIQUE INDEX orders_one_live_per_user
    ON orders (user_id, activity_id, item_id)
    WHERE status IN ('UNPAID', 'PAID');

-- The closer's scan: unpaid orders by age.
CREATE INDEX orders_unpaid_by_age ON orders (created_at) WHERE status = 'UNPAID';
CREATE INDEX orders_by_item ON orders (activity_id, item_id);

CREATE TABLE processed_requests (
    request_id   text        PRIMARY KEY,
    outcome      text        NOT NULL CHECK (outcome IN ('CREATED', 'REJECTED')),
    reason       text,
    order_no     text        NOT NULL,
    user_id      bigint      NOT NULL,
    activity_id  bigint      NOT NULL,
    item_id      bigint      NOT NULL,
    quantity     integer     NOT NULL,
    reserved_at  timestamptz NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((outcome = 'REJECTED') = (reason IS NOT NULL))
);
CREATE INDEX processed_requests_by_order_no ON processed_requests (order_no);

-- Outbox of Redis rollbacks, written in the transaction that decided them.
-- One compensation per reservation (order_no).
CREATE TABLE redis_compensations (
    id          bigserial   PRIMARY KEY,
    request_id  text        NOT NULL,
    order_no    text        NOT NULL UNIQUE,
    activity_id bigint      NOT NULL,
    item_id     bigint      NOT NULL,
    user_id     bigint      NOT NULL,
    quantity    integer     NOT NULL,
    reason      text        NOT NULL,
    -- When set, the user's limit marker is handed to this request instead of
    -- being freed (the user still holds that live order).
    limit_owner text,
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    applied_at  timestamptz
);
CREATE INDEX redis_compensations_pending ON redis_compensations (created_at) WHERE applied_at IS NULL;

-- Fencing tokens of Redis lock holders: a write carrying a token older than
-- the newest one seen for the same lock is refused.
CREATE TABLE lock_fences (
    name       text        PRIMARY KEY,
    token      bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
