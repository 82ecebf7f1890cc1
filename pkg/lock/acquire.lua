-- KEYS[1] lock key, KEYS[2] fencing counter; ARGV[1] holder token, ARGV[2] ttl in ms.
-- One script, so the counter moves only for a real acquisition and fencing
-- tokens follow acquisition order. Returns the fencing token, or 0 when the
-- lock is held (INCR never yields 0).
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
return redis.call('INCR', KEYS[2])
