-- reconcile: compares one item's Redis projection with Postgres, atomically.
-- The caller holds the item's stock row FOR UPDATE while it runs, so no order
-- of the item can commit meanwhile; the reservations in flight are counted
-- against the journal as it is now, so a reserve, release or ack racing with
-- the check is either wholly in this view or wholly out of it.
-- Mode "check" only reads; mode "fix" also makes Redis agree with Postgres:
--   stock = DB stock - in flight, sale window = the activity's, markers of
--   live orders present, markers nobody owns removed; the item's marker
--   index then lists exactly the users checked whose marker exists (stale
--   members dropped), and, when the users came from a keyspace scan, is
--   marked complete (IndexComplete, stock.go).
-- A fix of a bucketed item carries the fencing token of the item's bucket
-- lock (bucketlock.go) and is refused, before it reads, when the
-- bucket's fence is newer: its lock expired and a mover claimed the item.
-- KEYS: 1 stock, 2 sale, 3 journal, 4 the bucket's fence, 5 the marker index,
--       then one fate key per compensation, then one limit marker per user
--       (in ARGV order)
-- ARGV: 1 mode, 2 DB stock, 3 starts (unix ms), 4 ends (unix ms), 5 cap,
--       6 stock/sale expiry (unix s), 7 marker expiry (unix s),
--       8 #committed, 9 #compensations, 10 #users,
--       11 fencing token ('' for an item of one bucket: no mover touches it),
--       12 the sale's bucket count a fix writes ('' for one bucket),
--       13 '1' when the users include every marker a keyspace scan found
--       (a fix then marks the index complete), else '',
--       then requestId, orderNo of each journaled request created as an order,
--       then requestId, orderNo, quantity of each pending compensation,
--       then per user the requestId of their live order ('' if none) and
--       the user id.
-- In flight: journal entries not created as that order (still to be decided,
-- or rejected and awaiting their compensation, which drops the entry), plus
-- compensations whose release has not run (fate is not "released:<orderNo>")
-- and that are not already counted through their journal entry.
-- A marker may be held by its user's live order, a reservation in flight or
-- a compensation not yet released; any other value is wrong (live user) or
-- extra (no live order).
local mode = ARGV[1]
if mode == 'fix' and ARGV[11] ~= '' and tonumber(ARGV[11]) < tonumber(redis.call('GET', KEYS[4]) or '0') then
  return 'STALE'
end
local nCommitted, nComp, nUsers = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local a = 14
local committed = {}
for _ = 1, nCommitted do
  committed[ARGV[a]] = ARGV[a + 1]
  a = a + 2
end

local inflight, entries, unreadable = 0, 0, 0
local counted, owners = {}, {}
local journal = redis.call('HGETALL', KEYS[3])
for i = 1, #journal, 2 do
  local rid = journal[i]
  local ok, ev = pcall(cjson.decode, journal[i + 1])
  if ok and type(ev) == 'table' and type(ev['orderNo']) == 'string' and type(ev['quantity']) == 'number' then
    if committed[rid] ~= ev['orderNo'] then
      inflight = inflight + ev['quantity']
      entries = entries + 1
      counted[rid] = ev['orderNo']
      owners[rid] = true
    end
  else
    unreadable = unreadable + 1
  end
end

local comps = 0
for i = 1, nComp do
  local rid, ono, q = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  if redis.call('GET', KEYS[5 + i]) ~= 'released:' .. ono then
    owners[rid] = true
    if counted[rid] ~= ono then
      inflight = inflight + q
      comps = comps + 1
    end
  end
end

local expected = tonumber(ARGV[2]) - inflight
local cur = redis.call('GET', KEYS[1])
local exists, curN = 0, 0
if cur then
  curN = tonumber(cur)
  if curN then exists = 1 else exists, curN = 2, 0 end
end

local sale = redis.call('HMGET', KEYS[2], 'starts', 'ends', 'cap')
local saleState = 'ok'
if not sale[1] and not sale[2] and not sale[3] then
  saleState = 'missing'
elseif sale[1] ~= ARGV[3] or sale[2] ~= ARGV[4] or sale[3] ~= ARGV[5] then
  saleState = 'differs'
end

local missing, wrong, extra = {}, {}, {}
local live, uid, held = {}, {}, {}
local mk = 5 + nComp
for i = 1, nUsers do
  live[i], uid[i] = ARGV[a], ARGV[a + 1]
  a = a + 2
  local v = redis.call('GET', KEYS[mk + i])
  held[i] = v ~= false
  if live[i] ~= '' then
    if not v then
      missing[#missing + 1] = i
    elseif v ~= live[i] and not owners[v] then
      wrong[#wrong + 1] = i
    end
  elseif v and not owners[v] then
    extra[#extra + 1] = i
  end
end

if mode == 'fix' then
  if saleState ~= 'ok' then
    redis.call('HSET', KEYS[2], 'starts', ARGV[3], 'ends', ARGV[4], 'cap', ARGV[5])
    redis.call('EXPIREAT', KEYS[2], ARGV[6])
  end
  if ARGV[12] ~= '' and redis.call('HGET', KEYS[2], 'buckets') ~= ARGV[12] then
    redis.call('HSET', KEYS[2], 'buckets', ARGV[12])
  end
  if exists ~= 1 or curN ~= expected then
    redis.call('SET', KEYS[1], string.format('%d', expected), 'EXAT', ARGV[6])
  end
  for _, i in ipairs(missing) do redis.call('SET', KEYS[mk + i], live[i], 'EXAT', ARGV[7]) end
  for _, i in ipairs(wrong) do redis.call('SET', KEYS[mk + i], live[i], 'EXAT', ARGV[7]) end
  for _, i in ipairs(extra) do redis.call('DEL', KEYS[mk + i]) end
  for _, i in ipairs(missing) do held[i] = true end
  for _, i in ipairs(extra) do held[i] = false end
  for i = 1, nUsers do
    if held[i] then redis.call('SADD', KEYS[5], uid[i]) else redis.call('SREM', KEYS[5], uid[i]) end
  end
  if ARGV[13] == '1' then redis.call('SADD', KEYS[5], '*') end
  -- As long as the markers it lists (EXAT ARGV[7]), or longer.
  if redis.call('EXISTS', KEYS[5]) == 1 and redis.call('TTL', KEYS[5]) < 0 then redis.call('EXPIREAT', KEYS[5], ARGV[7]) end
end

return {exists, curN, inflight, entries, comps, saleState, missing, wrong, extra, unreadable}
