-- KEYS[1] fencing counter; ARGV[1] the newest token Postgres recorded,
-- ARGV[2] where to put the counter if it is below that (it was lost with a
-- Redis that restarted empty), so the next acquisition's token is above
-- every token any holder may carry.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
