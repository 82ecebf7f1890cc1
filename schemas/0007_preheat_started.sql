-- When the item's first preheat began. From then on its stock layout (the
-- bucket count) is fixed: a preheat records it here, in Postgres, before it
-- writes any Redis key, so whatever part of a preheat reached Redis and
-- every later preheat, the reconciler's fix and every gateway agree on it.
-- preheat_started_at set and preheated_at NULL is a preheat that has not
-- finished: its Redis stock keys may exist, but it has no sale hash, so it
-- sells nothing. Items preheated before this column existed began then.
ALTER TABLE item_stock ADD COLUMN preheat_started_at timestamptz;
UPDATE item_stock SET preheat_started_at = preheated_at WHERE preheated_at IS NOT NULL;
