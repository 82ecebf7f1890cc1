-- give: the second step of a transfer between buckets (see take.lua). Runs on
-- the target bucket: adds the units unless this transfer id was given before,
-- so a mover that died after the give and repeats it changes nothing. The
-- target is then held for a moment: its new units are not moved on at once
-- (a lone unit would otherwise hop between empty buckets every pass).
-- Mode "cancel" (the reconciler's fix, which has accounted for the units
-- anew) only marks the id given, so its give can never run. A stale fencing
-- token is refused as in take.lua.
-- KEYS: 1 target stock, 2 the transfer's given marker, 3 the target's hold,
--       4 target fence
-- ARGV: 1 units, 2 marker lifetime (s), 3 hold (ms), 4 fencing token, 5 mode (give, cancel)
if tonumber(ARGV[4]) < tonumber(redis.call('GET', KEYS[4]) or '0') then return 'STALE' end
if redis.call('EXISTS', KEYS[2]) == 1 then return 'GIVEN' end
if ARGV[5] == 'cancel' then
  redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[2]))
  return 'GIVEN'
end
if not tonumber(redis.call('GET', KEYS[1]) or '') then return 'NO_STOCK' end
redis.call('INCRBY', KEYS[1], tonumber(ARGV[1]))
redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[2]))
redis.call('SET', KEYS[3], '1', 'PX', tonumber(ARGV[3]))
return 'GIVEN'
