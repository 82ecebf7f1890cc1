-- claim: the worker takes ownership of reservations before deciding them in
-- Postgres. Once claimed, the gateway's abort no longer releases them, so an
-- event whose produce looked failed but arrived is never both ordered and
-- given back.
-- KEYS: 1 journal, 2.. one fate key per reservation
-- ARGV: 1 fate lifetime (s), then requestId, orderNo pairs in KEYS order
-- Answers per reservation: CLAIMED, RELEASED (the gateway aborted it: a ghost),
-- or UNKNOWN (no journal entry: Redis lost it, or it was already acked).
local out = {}
for i = 2, #KEYS do
  local rid = ARGV[2 * (i - 1)]
  local ono = ARGV[2 * (i - 1) + 1]
  local fate = redis.call('GET', KEYS[i])
  if fate == 'released:' .. ono then
    out[#out + 1] = 'RELEASED'
  elseif fate == 'claimed:' .. ono then
    out[#out + 1] = 'CLAIMED'
  else
    local entry = redis.call('HGET', KEYS[1], rid)
    if entry and cjson.decode(entry)['orderNo'] == ono then
      redis.call('SET', KEYS[i], 'claimed:' .. ono, 'EX', ARGV[1])
      out[#out + 1] = 'CLAIMED'
    else
      out[#out + 1] = 'UNKNOWN'
    end
  end
end
return out
