-- restore: rebuild lost dedup records (after Redis lost a sale's keys) so a
-- client's retry replays its first answer instead of reserving again. A
-- record that exists is never touched.
-- KEYS: dedup record, order index, pairs per request (one item)
-- ARGV: 1 lifetime (s, from now by Redis's clock), then per request: fp, orderNo, remaining, event, requestId
local n = 0
for i = 1, #KEYS, 2 do
  local j = 2 + ((i - 1) / 2) * 5
  if redis.call('EXISTS', KEYS[i]) == 0 then
    redis.call('HSET', KEYS[i], 'fp', ARGV[j], 'orderNo', ARGV[j + 1], 'remaining', ARGV[j + 2], 'event', ARGV[j + 3])
    redis.call('EXPIRE', KEYS[i], ARGV[1])
    redis.call('SET', KEYS[i + 1], ARGV[j + 4], 'EX', ARGV[1], 'NX')
    n = n + 1
  end
end
return n
