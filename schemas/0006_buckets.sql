-- Bucketed stock (docs/capacity.md "Bucketed stock"): an item's Redis stock
-- split over this many buckets, each under its own hash tag. 1 is the plain
-- layout. Fixed once the item is preheated (the buckets of its live
-- reservations and orders are derived from it: FNV-1a(userId) mod buckets).
ALTER TABLE item_stock ADD COLUMN buckets integer NOT NULL DEFAULT 1 CHECK (buckets BETWEEN 1 AND 64);
