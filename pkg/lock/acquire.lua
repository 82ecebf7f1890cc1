-- KEYS[1] lock key, KEYS[2] fencing counter; ARGV[1] holder token, ARGV[2] ttl in ms.
-- One script, so the counter moves only for a real acquisition and fencing
-- tokens follow acquisition order. The lock's value is "<token>:<fence>".
-- Returns the fencing token, or 0 when another holder has the lock (INCR
-- never yields 0).
--
-- A second run for the same token is the client resending an acquisition
-- whose reply it lost (a Cluster client does, retries off or not): it
-- answers the fence the first run took and restarts the ttl, as the holder
-- counts it from this send; refusing would leak the lock until its ttl.
local cur = redis.call('GET', KEYS[1])
if cur then
  local token, fence = string.match(cur, '^(.*):(%d+)$')
  if token == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(fence)
  end
  return 0
end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
return fence
