-- arm: puts one bucket on sale, writing its sale hash and its expiry at once.
-- A bucket the kill switch ended (its 'ended' tombstone, end.lua) is armed
-- no later than that end, whatever window the caller read: the sale stays
-- ended.
-- KEYS[1] the bucket's sale hash.
-- ARGV: 1 starts (unix ms), 2 ends (unix ms), 3 cap, 4 expiry (unix s),
--       5 the item's bucket count ('' for one bucket: no count is written).
local starts, ends = tonumber(ARGV[1]), tonumber(ARGV[2])
local ended = tonumber(redis.call('HGET', KEYS[1], 'ended'))
if ended and ends > ended then
  ends = ended
  starts = math.min(starts, ends - 1)
end
redis.call('HSET', KEYS[1], 'starts', starts, 'ends', ends, 'cap', ARGV[3])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'buckets', ARGV[5]) end
redis.call('EXPIREAT', KEYS[1], ARGV[4])
return 1
