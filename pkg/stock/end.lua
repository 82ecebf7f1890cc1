-- The kill switch on one bucket's sale: its window ends at the earliest of
-- its own end, ARGV[1] (unix ms, the end the caller recorded in Postgres)
-- and Redis's now, so the next reserve script of every gateway answers
-- NOT_ON_SALE; a sale that had not started ends before its start. Only ever
-- moves the end earlier, so a repeat or a race changes nothing. No sale
-- hash (never armed, or expired): nothing to end, -1.
-- KEYS[1] sale hash.
local sale = redis.call('HMGET', KEYS[1], 'starts', 'ends')
if not sale[1] or not sale[2] then return {-1, -1} end
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ends = math.min(tonumber(sale[2]), tonumber(ARGV[1]), now)
local starts = math.min(tonumber(sale[1]), ends - 1)
redis.call('HSET', KEYS[1], 'starts', starts, 'ends', ends)
return {starts, ends}
