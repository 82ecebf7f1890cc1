-- The kill switch on one bucket's sale: its window ends at the earliest of
-- its own end, ARGV[1] (unix ms, the end the caller recorded in Postgres)
-- and Redis's now, so the next reserve script of every gateway answers
-- NOT_ON_SALE; a sale that had not started ends before its start. Only ever
-- moves the end earlier, so a repeat or a race changes nothing. The end is
-- also kept as the hash's 'ended' field, a tombstone arm.lua never arms
-- past: an arm that was sent before the end and reaches Redis after it (a
-- preheat's late pipeline) cannot put the sale on again. No sale hash
-- (never armed, or expired): only the tombstone is written, expiring at
-- ARGV[2] (unix s), and -1 answered.
-- KEYS[1] sale hash.
local sale = redis.call('HMGET', KEYS[1], 'starts', 'ends', 'ended')
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ended = math.min(tonumber(ARGV[1]), now)
if sale[3] then ended = math.min(ended, tonumber(sale[3])) end
if not sale[1] or not sale[2] then
  redis.call('HSET', KEYS[1], 'ended', ended)
  if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIREAT', KEYS[1], ARGV[2]) end
  return {-1, -1}
end
local ends = math.min(tonumber(sale[2]), ended)
local starts = math.min(tonumber(sale[1]), ends - 1)
redis.call('HSET', KEYS[1], 'starts', starts, 'ends', ends, 'ended', ends)
return {starts, ends}
