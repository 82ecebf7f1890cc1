-- claim: the worker takes ownership of reservations before deciding them in
-- Postgres. Once claimed, the gateway's abort no longer releases them, so an
-- event whose produce looked failed but arrived is never both ordered and
-- given back. The claim is remembered in the fate key and in the dedup
-- record (field "claimed" = orderNo), where the reserve script of a retry
-- reads it: the retry may be shown the orderNo, it is durable.
-- KEYS: 1 journal, then per reservation its fate key and its dedup record
-- ARGV: 1 fate lifetime (s), then requestId, orderNo pairs in KEYS order
-- Answers per reservation a pair: the status — CLAIMED, RELEASED (the
-- gateway aborted it: a ghost), or UNKNOWN (no journal entry: Redis lost it,
-- or it was already acked) — and the journal entry, the event the gateway
-- reserved ('' when the journal no longer holds it). The message that named
-- the reservation is only a pointer: the worker decides from the entry.
local out = {}
local n = (#KEYS - 1) / 2
for i = 1, n do
  local fateKey, reqKey = KEYS[2 * i], KEYS[2 * i + 1]
  local rid = ARGV[2 * i]
  local ono = ARGV[2 * i + 1]
  local fate = redis.call('GET', fateKey)
  local entry = redis.call('HGET', KEYS[1], rid)
  if entry then
    -- An entry that is not even JSON is still this request's reservation:
    -- the worker sees it is invalid and releases it.
    local ok, e = pcall(cjson.decode, entry)
    if ok and type(e) == 'table' and e['orderNo'] ~= ono then entry = false end
  end
  if fate == 'released:' .. ono then
    out[#out + 1] = 'RELEASED'
    entry = false
  elseif fate == 'claimed:' .. ono then
    -- Written again, so a WAIT after this script covers the claim even when
    -- the first one's WAIT failed on another connection (Store.runWaited).
    redis.call('SET', fateKey, fate, 'EX', ARGV[1])
    out[#out + 1] = 'CLAIMED'
  elseif entry then
    redis.call('SET', fateKey, 'claimed:' .. ono, 'EX', ARGV[1])
    if redis.call('HGET', reqKey, 'orderNo') == ono then redis.call('HSET', reqKey, 'claimed', ono) end
    out[#out + 1] = 'CLAIMED'
  else
    out[#out + 1] = 'UNKNOWN'
  end
  out[#out + 1] = entry or ''
end
return out
