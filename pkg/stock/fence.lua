-- fence: a new holder of an item's bucket lock claims one bucket: the
-- bucket's fence rises to the holder's fencing token, so from now on every
-- bucket script refuses an older holder's token (one whose lock expired while
-- it was paused or cut off, and that still means to write). The fence lives
-- as long as the bucket's stock, and at least ARGV[2].
-- KEYS: 1 the bucket's fence, 2 the bucket's stock
-- ARGV: 1 fencing token, 2 minimum lifetime (ms)
-- Returns 1 claimed, 0 a newer holder already claimed the bucket.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local tok = tonumber(ARGV[1])
if tok < cur then return 0 end
local ttl = redis.call('PTTL', KEYS[2])
if ttl < tonumber(ARGV[2]) then ttl = tonumber(ARGV[2]) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return 1
