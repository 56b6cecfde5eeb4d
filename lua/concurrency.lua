-- concurrency: a distributed semaphore of leased slots (limiter.Slots). A
-- standalone script: lib.lua is not prepended (see Standalone in embed.go).
--
-- KEYS: limiter hash (prefix:{name}:l), slots sorted set (prefix:{name}:s:
-- lease id → expiry, Unix µs).
-- ARGV: op ('acquire' | 'renew' | 'release'), lease id.
-- Reply: {code, granted (0|1), now_us, lease_ns, retry_after_ns, in_use,
-- limit, readded (0|1)}; code 1 ok, -1 no such limiter, -2 the lease is not
-- held (release: it expired or never was; renew: that, and no slot is free),
-- {-5, kind} a limiter of another kind.
--
-- A renew of a lease the set does not hold registers it again when the limit
-- leaves room (readded 1): the set may have been lost (a restart without
-- persistence, a failover that lost writes) while its holders still run, and
-- they rebuild it as they renew. Until they have, new acquirers may take the
-- slots they hold; the holders that then find no room are told their lease
-- is lost. So the limit can be exceeded for at most one renewal interval
-- after a loss, and never once every holder has renewed.
--
-- The limiter hash holds cc_limit, cc_lease (ns) and cc_lease_us, the lease
-- rounded up to µs: a lease taken at t µs ends at t*1000 + lease ns, and as
-- every now is a whole µs, it has expired at now exactly when now_us >= t +
-- ceil(lease / 1000), which is its score. Scores are whole µs below 2^53 (until
-- the year 2255), exact in a double. Expired leases are reclaimed on every
-- call, so a crashed holder loses its slot when its lease ends.

if redis.replicate_commands then redis.replicate_commands() end

-- Reply codes (store/replies.go has the same numbers under the same names).
local OK, NOT_FOUND, NOT_HELD, OTHER_KIND = 1, -1, -2, -5

local function int(x) return string.format('%.0f', x) end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local c = redis.call('HMGET', KEYS[1], 'kind', 'cc_limit', 'cc_lease', 'cc_lease_us')
if not c[1] then return {NOT_FOUND} end
if c[1] ~= 'concurrency' then return {OTHER_KIND, c[1]} end
local limit, lease_ns, lease_us = tonumber(c[2]), tonumber(c[3]), tonumber(c[4])
local op, id = ARGV[1], ARGV[2]

redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', int(now))
local n = redis.call('ZCARD', KEYS[2])

-- keep gives the set a TTL: its latest lease.
local function keep()
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', KEYS[2], int(math.ceil((tonumber(last[2]) - now) / 1000) + 1))
  end
end

if op == 'acquire' then
  local held = redis.call('ZSCORE', KEYS[2], id)
  if not held and n >= limit then
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    local retry = 0
    if first[2] then retry = (tonumber(first[2]) - now) * 1000 end
    return {OK, 0, now, lease_ns, retry, n, limit}
  end
  redis.call('ZADD', KEYS[2], int(now + lease_us), id)
  if not held then n = n + 1 end
  keep()
  return {OK, 1, now, lease_ns, 0, n, limit}
elseif op == 'renew' then
  local readded = 0
  if not redis.call('ZSCORE', KEYS[2], id) then
    if n >= limit then return {NOT_HELD, 0, now, lease_ns, 0, n, limit} end
    readded, n = 1, n + 1
  end
  redis.call('ZADD', KEYS[2], int(now + lease_us), id)
  keep()
  return {OK, 1, now, lease_ns, 0, n, limit, readded}
elseif op == 'release' then
  if redis.call('ZREM', KEYS[2], id) == 0 then return {NOT_HELD, 0, now, lease_ns, 0, n, limit} end
  return {OK, 1, now, lease_ns, 0, n - 1, limit}
end
return redis.error_reply('concurrency: unknown op ' .. tostring(op))
