-- take: the first step of moving units between two buckets of one item (the
-- mover, against stock stranded in some buckets while another is empty).
-- Runs on the source bucket; the units leave its stock and are recorded under
-- the transfer id until the target has them (give.lua) and the record is
-- dropped. Taking the same id twice takes once. A holder of the item's bucket
-- lock whose fencing token is below the bucket's fence (a newer holder claimed
-- the bucket: its lock expired) is refused before anything is read.
-- KEYS: 1 source stock, 2 source transfers (hash: id -> "<target bucket>:<units>"),
--       3 source fence
-- ARGV: 1 transfer id, 2 target bucket, 3 units, 4 fencing token
-- Returns 1 taken, 0 the source holds less, -1 stale token.
if tonumber(ARGV[4]) < tonumber(redis.call('GET', KEYS[3]) or '0') then return -1 end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 1 end
local q = tonumber(ARGV[3])
local cur = tonumber(redis.call('GET', KEYS[1]) or '')
if not cur or cur < q then return 0 end
redis.call('DECRBY', KEYS[1], q)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
