-- publish: marks reservations durable once their event is in Kafka (the
-- gateway after the produce's ack, the redrive after a re-publish), so a
-- retry may be shown the orderNo (reserve.lua). A record is marked only if it
-- still holds that orderNo: a mark never lands on a later reservation.
-- KEYS: dedup records (of one item); ARGV: the orderNo of each, in KEYS order
local n = 0
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'orderNo') == ARGV[i] then
    redis.call('HSET', KEYS[i], 'published', '1')
    n = n + 1
  end
end
return n
