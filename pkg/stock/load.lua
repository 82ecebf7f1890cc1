-- load: a preheat's first step for one bucket. The stock key gets its share
-- unless it holds one already (a repeated preheat never overwrites a running
-- sale's stock), and expires an hour after the sale ends. A fresh stock key
-- with no marker index yet starts the index as complete: no marker of this
-- sale exists, and from now on every script that sets or deletes one keeps
-- the index. An index that exists already is left as it is (one without the
-- IndexComplete member may miss markers an older binary set).
-- KEYS: 1 stock, 2 marker index
-- ARGV: 1 share, 2 stock expiry (unix s), 3 index expiry (unix s)
-- Returns 1 when it loaded the stock, 0 when the key held stock already.
local loaded = redis.call('SET', KEYS[1], ARGV[1], 'NX')
redis.call('EXPIREAT', KEYS[1], ARGV[2])
if not loaded then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SADD', KEYS[2], '*')
  redis.call('EXPIREAT', KEYS[2], ARGV[3])
end
return 1
