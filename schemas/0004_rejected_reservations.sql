-- A reservation refused because its requestId was already decided for another
-- reservation (the client reused the requestId for another item, which the
-- gateway's one atomic step cannot see). Its orderNo was shown in a 202, so it
-- must stay readable: GET /v1/orders/{orderNo} answers REJECTED with this
-- reason (I3, I4). processed_requests cannot hold it: its key is the requestId,
-- which belongs to the first reservation.
CREATE TABLE rejected_reservations (
    order_no    text        PRIMARY KEY,
    request_id  text        NOT NULL,
    user_id     bigint      NOT NULL,
    activity_id bigint      NOT NULL,
    item_id     bigint      NOT NULL,
    quantity    integer     NOT NULL,
    reason      text        NOT NULL,
    reserved_at timestamptz NOT NULL,
    rejected_at timestamptz NOT NULL DEFAULT now()
);
