-- reserve: the gateway's one round trip per order request.
-- KEYS: 1 stock, 2 sale, 3 limit marker, 4 dedup record, 5 journal, 6 order index,
--       7 this attempt's orderNo's fate key, 8 the item's marker index
-- ARGV: 1 requestId, 2 fingerprint, 3 orderNo, 4 quantity, 5 event JSON,
--       6 minimum dedup lifetime (s), 7 traceparent ('' if none), 8 user id,
--       9 '1': replay only (the order queue is down: a retry is answered from
--         its record, a new request reserves nothing and gets NO_RECORD),
--       10 the bucket count the caller routed the user by ('' : not checked)
-- Order matters: dedup first (a retry never reserves twice), then the sale,
-- then stock, and only then the user's limit, so a sold-out answer never
-- consumes the user's chance.
local rec = redis.call('HMGET', KEYS[4], 'fp', 'orderNo', 'remaining', 'published', 'claimed', 'event')
if rec[1] then
  if rec[1] ~= ARGV[2] then return {'IDEMPOTENCY_KEY_REUSED', rec[2], 0} end
  -- A second run of the same attempt (same orderNo) has told nobody anything yet.
  -- A replay carries the first attempt's event: its reservedAt dates the
  -- payBy the first answer showed.
  if rec[2] == ARGV[3] then return {'REPLAYED', rec[2], tonumber(rec[3]), rec[6] or ''} end
  -- Another attempt may be told this orderNo only once its event is durable:
  -- until then the reservation lives in Redis alone, and Redis losing it
  -- would make that answer a lie (I4). Durable means the produce was acked
  -- (published), a worker claimed it (claim.lua writes "claimed" into this
  -- record), or the journal no longer holds it (acked into Postgres, or
  -- decided there). Every key comes from KEYS (Redis Cluster).
  local durable = rec[4] ~= false or rec[5] == rec[2]
  if not durable then
    local e = redis.call('HGET', KEYS[5], ARGV[1])
    if e then
      -- An entry that is not a JSON object is still this request's
      -- reservation (claim.lua): not decided, so not durable.
      local ok, d = pcall(cjson.decode, e)
      durable = ok and type(d) == 'table' and d['orderNo'] ~= rec[2]
    else
      durable = true
    end
  end
  if not durable then return {'IN_PROGRESS', '', 0} end
  -- From now on it must resolve, so the first attempt's abort, should its
  -- produce fail after all, may no longer give the reservation back
  -- (release.lua: SHOWN); the redrive publishes it instead.
  redis.call('HSET', KEYS[4], 'shown', '1')
  return {'REPLAYED', rec[2], tonumber(rec[3]), rec[6] or ''}
end
if ARGV[9] == '1' then return {'NO_RECORD', '', 0} end
-- This orderNo was already given back (the gateway aborted it): a late copy
-- of its reserve changes nothing.
if redis.call('EXISTS', KEYS[7]) == 1 then return {'ABORTED', '', 0} end
local sale = redis.call('HMGET', KEYS[2], 'starts', 'ends', 'cap', 'buckets')
local stock = redis.call('GET', KEYS[1])
if not stock or not sale[1] or not sale[2] or not sale[3] then return {'NOT_ON_SALE', '', 0} end
-- The caller routed the user by a bucket count it read before the sale was
-- armed (its sale hash, which carries the count, is written last): the user
-- may belong to another bucket, where the limit marker is looked for.
-- Nothing is reserved; the caller routes again by the count answered.
local buckets = tonumber(sale[4]) or 1
if ARGV[10] and ARGV[10] ~= '' and tonumber(ARGV[10]) ~= buckets then return {'WRONG_BUCKETS', '', buckets} end
-- The sale window and the expiries go by Redis's clock: one clock for every
-- gateway, the one EXPIREAT is read by, so a gateway whose clock is off
-- neither sells outside the window nor refuses a running sale. (Before
-- Redis 7 a script must ask for effects replication to read TIME and write.)
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ends = tonumber(sale[2])
-- Before the start it says how long is left (a gateway's verdict lives no
-- longer: verdict.go).
if now < tonumber(sale[1]) then return {'NOT_ON_SALE', 'window', tonumber(sale[1]) - now} end
if now >= ends then return {'NOT_ON_SALE', 'window', 0} end
local q = tonumber(ARGV[4])
local cap = tonumber(sale[3])
if q > cap then return {'OVER_CAP', '', cap} end
stock = tonumber(stock)
if stock < q then return {'SOLD_OUT', '', stock} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {'ALREADY_PURCHASED', '', stock} end
local remaining = redis.call('DECRBY', KEYS[1], q)
local limitAt = math.floor(ends / 1000) + 86400
local reqAt = math.max(limitAt, math.floor(now / 1000) + tonumber(ARGV[6]))
redis.call('SET', KEYS[3], ARGV[1], 'EXAT', limitAt)
-- The index lives at least as long as the marker (the reconciler reads the
-- item's markers from it; see stock.go, MarkerIndex).
redis.call('SADD', KEYS[8], ARGV[8])
local idxTTL = redis.call('TTL', KEYS[8])
if idxTTL < 0 or math.floor(now / 1000) + idxTTL < limitAt then redis.call('EXPIREAT', KEYS[8], limitAt) end
redis.call('HSET', KEYS[4], 'fp', ARGV[2], 'orderNo', ARGV[3], 'remaining', remaining, 'event', ARGV[5])
if ARGV[7] and ARGV[7] ~= '' then redis.call('HSET', KEYS[4], 'tp', ARGV[7]) end
redis.call('EXPIREAT', KEYS[4], reqAt)
redis.call('SET', KEYS[6], ARGV[1], 'EXAT', reqAt)
redis.call('HSET', KEYS[5], ARGV[1], ARGV[5])
redis.call('EXPIREAT', KEYS[5], reqAt)
return {'RESERVED', ARGV[3], remaining}
