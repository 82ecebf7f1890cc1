-- idemkey: the record of one Idempotency-Key of a pay or cancel request.
-- KEYS: 1 the record
-- ARGV: 1 'begin' | 'finish' | 'abandon', 2 the holder's token,
--   begin:  3 payload fingerprint, 4 lease (ms)
--   finish: 3 answer status, 4 answer body, 5 lifetime (s)
-- begin answers {'BEGUN'} (the caller now holds the key for the lease),
-- {'REUSED'} (another payload holds it), {'IN_PROGRESS', lease left in ms},
-- or {'DONE', status, body} (the first answer). A holder that dies lets its
-- lease run out; the next request with the key then runs afresh, which pay
-- and cancel, idempotent themselves, answer alike.
local op = ARGV[1]
if op == 'begin' then
  local rec = redis.call('HMGET', KEYS[1], 'fp', 'status', 'body')
  if rec[1] then
    if rec[1] ~= ARGV[3] then return {'REUSED'} end
    if rec[2] then return {'DONE', rec[2], rec[3]} end
    return {'IN_PROGRESS', tostring(redis.call('PTTL', KEYS[1]))}
  end
  redis.call('HSET', KEYS[1], 'fp', ARGV[3], 'token', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {'BEGUN'}
end
-- finish and abandon act only for the holder, and only before an answer is
-- kept: a holder whose lease ran out touches nothing another now holds.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[2] or redis.call('HEXISTS', KEYS[1], 'status') == 1 then
  return {'LOST'}
end
if op == 'finish' then
  redis.call('HSET', KEYS[1], 'status', ARGV[3], 'body', ARGV[4])
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  return {'KEPT'}
end
redis.call('DEL', KEYS[1])
return {'ABANDONED'}
