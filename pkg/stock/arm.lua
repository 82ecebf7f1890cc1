-- arm: puts one bucket on sale, writing its sale hash and its expiry at once.
-- KEYS[1] the bucket's sale hash.
-- ARGV: 1 starts (unix ms), 2 ends (unix ms), 3 cap, 4 expiry (unix s),
--       5 the item's bucket count ('' for one bucket: no count is written).
redis.call('HSET', KEYS[1], 'starts', ARGV[1], 'ends', ARGV[2], 'cap', ARGV[3])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'buckets', ARGV[5]) end
redis.call('EXPIREAT', KEYS[1], ARGV[4])
return 1
