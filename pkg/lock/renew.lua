-- KEYS[1] lock key; ARGV[1] holder token, ARGV[2] ttl in ms.
-- Compare and extend in one step, for the same reason as release.lua.
-- Returns 1 if extended, else 0.
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
