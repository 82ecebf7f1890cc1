-- ack: drop the journal entries of reservations the worker has committed as
-- orders. An entry is dropped only if it still holds the same orderNo.
-- KEYS: 1 journal
-- ARGV: requestId, orderNo pairs
-- An entry that is not a JSON object is still its request's (claim.lua).
local function holds(entry, orderNo)
  if not entry then return false end
  local ok, e = pcall(cjson.decode, entry)
  return not ok or type(e) ~= 'table' or e['orderNo'] == orderNo
end
local n = 0
for i = 1, #ARGV, 2 do
  if holds(redis.call('HGET', KEYS[1], ARGV[i]), ARGV[i + 1]) then
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return n
