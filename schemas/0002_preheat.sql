-- Which items were preheated (their stock loaded into Redis), so the
-- reconciler knows what Redis must hold from Postgres alone: after a Redis
-- failover Redis cannot tell what it has lost. Per item, because preheat
-- loads items one by one and an item added to a preheated activity is not in
-- Redis until the next preheat.
ALTER TABLE item_stock ADD COLUMN preheated_at timestamptz;
