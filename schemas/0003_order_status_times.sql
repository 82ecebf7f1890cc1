-- I6 as a rule of the table: an order's status agrees with its times, so a
-- row can never be PAID and CLOSED, nor claim one without the other.
ALTER TABLE orders ADD CONSTRAINT orders_status_matches_times CHECK (
    (status = 'PAID') = (paid_at IS NOT NULL)
    AND (status = 'CLOSED') = (closed_at IS NOT NULL)
);
