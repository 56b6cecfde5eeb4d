-- fixed: counts fixed windows (store.Fixed) in the keys the store's
-- pipelines count them in by INCRBY, but from Redis' own TIME: the store
-- sends here what it cannot count from its estimate of Redis' clock, and
-- reads counts without counting (hits 0). A standalone script.
--
-- KEYS: the counters' bases (prefix:{name}:n:); a window's count is the
-- base followed by the window's start (Unix ms). ARGV: per key a period
-- (ms), a TTL (ms) and hits (0 reads the count). Reply: TIME's seconds and
-- microseconds, then per key its window's start (ms) and count.
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {tonumber(t[1]), tonumber(t[2])}
for i, base in ipairs(KEYS) do
  local period, ttl, hits = tonumber(ARGV[3 * i - 2]), ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  local start = ms - ms % period
  local key = base .. string.format('%d', start)
  local n
  if hits > 0 then
    n = redis.call('INCRBY', key, hits)
    if n == hits then redis.call('PEXPIRE', key, ttl) end
  else
    n = tonumber(redis.call('GET', key) or '0')
  end
  out[#out + 1] = start
  out[#out + 1] = n
end
return out
