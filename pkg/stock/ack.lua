-- ack: drop the journal entries of reservations the worker has committed as
-- orders. An entry is dropped only if it still holds the same orderNo.
-- KEYS: 1 journal
-- ARGV: requestId, orderNo pairs
local n = 0
for i = 1, #ARGV, 2 do
  local entry = redis.call('HGET', KEYS[1], ARGV[i])
  if entry and cjson.decode(entry)['orderNo'] == ARGV[i + 1] then
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return n
