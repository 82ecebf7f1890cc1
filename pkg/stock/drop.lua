-- drop: the last step of a transfer, once its target has the units (or the
-- transfer was cancelled): the record leaves the source bucket. A stale
-- fencing token is refused as in take.lua.
-- KEYS: 1 source transfers, 2 source fence
-- ARGV: 1 transfer id, 2 fencing token
if tonumber(ARGV[2]) < tonumber(redis.call('GET', KEYS[2]) or '0') then return -1 end
return redis.call('HDEL', KEYS[1], ARGV[1])
