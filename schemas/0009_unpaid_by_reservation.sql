-- The closer takes due orders by their reservation time (reserved_at, the
-- instant the gateway stamped and an order's payBy counts from), no longer
-- by created_at (when the worker committed it, later): the index it walks
-- follows. Replaced rather than added, so the worker's inserts keep one
-- partial index of unpaid orders to maintain.
DROP INDEX IF EXISTS orders_unpaid_by_age;
CREATE INDEX orders_unpaid_by_reservation ON orders (reserved_at) WHERE status = 'UNPAID';
