-- KEYS[1] lock key; ARGV[1] holder token.
-- Compare and delete in one step: a holder whose lock expired must never
-- delete the lock a newer holder has since taken. The value is
-- "<token>:<fence>" (acquire.lua). Returns 1 if deleted, else 0.
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  return redis.call('DEL', KEYS[1])
end
return 0
