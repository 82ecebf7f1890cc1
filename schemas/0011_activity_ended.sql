-- When the kill switch ended the activity (POST .../end), set once and never
-- cleared. From then on an update may not move the activity's window
-- (SALE_ENDED): its end stays the one the kill switch recorded, so neither a
-- PUT nor a preheat nor the reconciler's fix, which all take the window from
-- this row, can put the sale on again. An operator who wants the goods on
-- sale again creates a new activity.
ALTER TABLE activities ADD COLUMN ended_at timestamptz;
