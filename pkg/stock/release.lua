-- release: the rollback script. Gives a reservation's stock and the user's
-- limit marker back and drops its journal entry, at most once per
-- reservation: the fate key remembers "released:<orderNo>".
-- KEYS: 1 stock, 2 limit marker, 3 journal, 4 fate, 5 dedup record, 6 order index,
--       7 the item's marker index
-- ARGV: 1 requestId, 2 orderNo, 3 quantity, 4 mode, 5 limit owner, 6 fate lifetime (s),
--       7 user id
-- mode "abort": the gateway could not produce the event. If a worker has
--   already claimed the reservation (or its order was decided and
--   compensated since) the event did arrive, so nothing is released (answer
--   CLAIMED); if a retry of the request was already told
--   this orderNo, nothing is released either (answer SHOWN: the redrive
--   publishes the journal entry); otherwise the dedup record is dropped too, so a
--   retry with the same requestId starts afresh.
-- mode "compensate": the worker or closer decided in Postgres; always applies.
-- limit owner: when not empty, the marker is handed to that request (the user
--   still holds that live order) instead of being deleted.
-- Whether a journal entry is this orderNo's: an entry that is not a JSON
-- object is still its request's reservation (claim.lua).
local function holds(entry)
  if not entry then return false end
  local ok, e = pcall(cjson.decode, entry)
  return not ok or type(e) ~= 'table' or e['orderNo'] == ARGV[2]
end
local fate = redis.call('GET', KEYS[4])
if fate == 'released:' .. ARGV[2] then
  -- Released by a compensation: a worker claimed it and Postgres decided it
  -- (an order since closed or cancelled, or a REJECTED record), all while the
  -- gateway waited on its produce. A compensation keeps the dedup record, an
  -- abort drops it; so the event did arrive and the orderNo resolves, as
  -- after a claim. (A gateway paused past CLOSE_AFTER met this under chaos.)
  if ARGV[4] == 'abort' and redis.call('HGET', KEYS[5], 'orderNo') == ARGV[2] then return 'CLAIMED' end
  return 'ALREADY_RELEASED'
end
if ARGV[4] == 'abort' then
  if fate == 'claimed:' .. ARGV[2] then return 'CLAIMED' end
  -- A retry was already answered 2xx with this orderNo (reserve.lua marks the
  -- dedup record): giving it back would make that answer a lie. It stays
  -- journaled and the redrive publishes it.
  if redis.call('HGET', KEYS[5], 'orderNo') == ARGV[2] and redis.call('HEXISTS', KEYS[5], 'shown') == 1 then
    return 'SHOWN'
  end
  -- An abort may follow a reserve whose reply was lost: give back only what
  -- this orderNo actually reserved.
  if redis.call('HGET', KEYS[5], 'orderNo') ~= ARGV[2] and not holds(redis.call('HGET', KEYS[3], ARGV[1])) then
    -- Remembered all the same: a reserve of this orderNo still on its way
    -- (sent before the abort, run after it) must not take stock.
    redis.call('SET', KEYS[4], 'released:' .. ARGV[2], 'EX', ARGV[6])
    return 'NOT_RESERVED'
  end
end
redis.call('SET', KEYS[4], 'released:' .. ARGV[2], 'EX', ARGV[6])
-- A missing stock key means Redis lost the sale; the reconciler rebuilds it
-- from Postgres, which already counts this unit, so it is not recreated here.
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('INCRBY', KEYS[1], ARGV[3]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  if ARGV[5] ~= '' then
    redis.call('SET', KEYS[2], ARGV[5], 'KEEPTTL')
  else
    redis.call('DEL', KEYS[2])
    redis.call('SREM', KEYS[7], ARGV[7])
  end
end
if holds(redis.call('HGET', KEYS[3], ARGV[1])) then redis.call('HDEL', KEYS[3], ARGV[1]) end
-- An abort forgets the dedup record too, so a retry starts afresh. A
-- compensation keeps it: that orderNo was shown and is decided in Postgres
-- (an order, or a REJECTED record), so a replay names it again (I3).
if ARGV[4] == 'abort' and redis.call('HGET', KEYS[5], 'orderNo') == ARGV[2] then
  redis.call('DEL', KEYS[5], KEYS[6])
end
return 'RELEASED'
