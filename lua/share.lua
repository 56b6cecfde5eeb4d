-- share: Doorman capacity leases, limiter.ShareParams.Request and
-- limiter.ShareState.Return operation for operation. A standalone script:
-- lib.lua is not prepended (see Standalone in embed.go).
--
-- KEYS: limiter hash (prefix:{name}:l), client hash (prefix:{name}:c).
-- ARGV: op ('request' | 'return'), client id, wants, has, weight (request).
-- Reply: request → {1, gets, now_us, lease_ns, refresh_ns, safe_capacity,
-- learning (0|1), version}; return → {1, version}. Floats travel as '%.17g'
-- strings (exact). Errors: {-1} no such limiter, {-2} the client holds no
-- lease (return), {-5, kind} a limiter of another kind.
--
-- The limiter hash holds the parameters configure_lease.lua writes (sh_cap,
-- sh_alg, sh_lease (ns), sh_lease_us, sh_refresh (ns), sh_safe, sh_learn_us)
-- and the state's own times: sh_start (µs, the first request since the state
-- was created) and sh_until (µs, the end of learning mode; absent: none). The
-- client hash maps a client id to 'wants has weight expires_us'.
--
-- Times are Unix µs from Redis TIME, whole numbers below 2^53 until the year
-- 2255, so exact. limiter/ keeps ns: a lease of L ns taken at t µs ends at
-- t*1000 + L ns, and since every now is a whole µs, "expired at now" (Expires
-- <= now) is exactly now_us >= t + ceil(L / 1000); so leases and the learning
-- window are kept as t + ceil(L / 1000) µs (Go passes the ceils) and every
-- decision is the model's.
--
-- Other clients are visited in byte order of their ids, as limiter's each
-- does, so that sums and the fair-share rounds add in the same order.

if redis.replicate_commands then redis.replicate_commands() end

-- Reply codes (store/replies.go has the same numbers under the same names).
local OK, NOT_FOUND, NOT_HELD, OTHER_KIND = 1, -1, -2, -5

-- num is tonumber for the numbers limitd writes; gopher-lua (miniredis) reads
-- no exponent form without a '.' ("1e+21"), so give it one.
local function num(s)
  local x = tonumber(s)
  if x == nil and type(s) == 'string' then x = tonumber((string.gsub(s, '[eE]', '.0e', 1))) end
  return x
end

local function fmt(x) return string.format('%.17g', x) end
local function int(x) return string.format('%.0f', x) end

-- byte-order comparison: Redis's Lua compares strings with strcoll, which
-- follows the server's locale.
local function less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local c = redis.call('HMGET', KEYS[1], 'kind', 'ver', 'sh_cap', 'sh_alg', 'sh_lease', 'sh_lease_us',
  'sh_refresh', 'sh_safe', 'sh_learn_us', 'sh_start', 'sh_until')
if not c[1] then return {NOT_FOUND} end
if c[1] ~= 'share' then return {OTHER_KIND, c[1]} end
local ver = num(c[2])
local op, me = ARGV[1], ARGV[2]

-- The holdings, expired ones included (limiter's Holdings before a call).
local H = {}
local raw = redis.call('HGETALL', KEYS[2])
for i = 1, #raw, 2 do
  local w, h, g, e = string.match(raw[i + 1], '^(%S+) (%S+) (%S+) (%S+)$')
  H[raw[i]] = {wants = num(w), has = num(h), weight = num(g), exp = num(e)}
end
local known = H[me] ~= nil

-- clean drops the expired leases: they are free capacity.
local function clean()
  local dead = {}
  for id, h in pairs(H) do
    if h.exp <= now then dead[#dead + 1] = id end
  end
  for i = 1, #dead, 1000 do
    redis.call('HDEL', KEYS[2], unpack(dead, i, math.min(i + 999, #dead)))
  end
  for _, id in ipairs(dead) do H[id] = nil end
end

-- keep gives the client hash a TTL: the latest lease, or the end of the
-- learning window while a client the state has no record of could still
-- start learning mode (known, above, counts expired leases too).
local function keep(learn_end)
  local last = learn_end
  for _, h in pairs(H) do
    if h.exp > last then last = h.exp end
  end
  if last > now then
    redis.call('PEXPIRE', KEYS[2], int(math.ceil((last - now) / 1000) + 1))
  end
end

if op == 'return' then
  clean()
  local started = num(c[10]) or now
  if not H[me] then return {NOT_HELD} end
  redis.call('HDEL', KEYS[2], me)
  H[me] = nil
  keep(started + num(c[9]))
  return {OK, ver}
end

local cap, alg, lease_ns, lease_us = num(c[3]), c[4], num(c[5]), num(c[6])
local refresh, safe, learn_us = num(c[7]), num(c[8]), num(c[9])
local wants, has, weight = num(ARGV[3]), num(ARGV[4]), math.max(num(ARGV[5]), 1)

local started = num(c[10])
if not started then
  started = now
  redis.call('HSET', KEYS[1], 'sh_start', int(now))
end
local learn_until = num(c[11]) or 0
if has > 0 and not known and now < started + learn_us then
  learn_until = started + learn_us
  redis.call('HSET', KEYS[1], 'sh_until', int(learn_until))
end
clean()

local ids = {}
for id in pairs(H) do
  if id ~= me then ids[#ids + 1] = id end
end
table.sort(ids, less)

local assigned = 0
for _, id in ipairs(ids) do assigned = assigned + H[id].has end

local function sum_weights()
  local s = 0
  for _, id in ipairs(ids) do s = s + H[id].weight end
  return s
end

local function sum_wants()
  local s = 0
  for _, id in ipairs(ids) do s = s + H[id].wants end
  return s
end

-- The algorithms (limiter.Algorithms), for the requester: w is its weight.
local ALG = {}

ALG.static = function(w)
  return math.min(wants, cap * w / (sum_weights() + w))
end

ALG.proportional_share = function(w)
  local equal = cap / (sum_weights() + w)
  local mine = equal * w
  if wants <= mine or sum_wants() + wants <= cap then return wants end
  local extra, need = 0, 0
  local function visit(cw, cg)
    local share = equal * cg
    if cw < share then extra = extra + (share - cw) else need = need + (cw - share) end
  end
  for _, id in ipairs(ids) do visit(H[id].wants, H[id].weight) end
  visit(wants, w)
  return mine + (wants - mine) * (extra / need)
end

ALG.fair_share = function(w)
  if wants <= cap * w / (sum_weights() + w) or sum_wants() + wants <= cap then return wants end
  local claims = {}
  for _, id in ipairs(ids) do claims[#claims + 1] = {wants = H[id].wants, weight = H[id].weight, gets = 0} end
  local mine = {wants = wants, weight = w, gets = 0}
  claims[#claims + 1] = mine
  local epsilon = 1e-9
  local left = cap
  while left > epsilon and #claims > 0 do
    local weights = 0
    for _, cl in ipairs(claims) do weights = weights + cl.weight end
    local fair = left / weights
    if fair < epsilon then break end
    local next = {}
    for _, cl in ipairs(claims) do
      local need, share = cl.wants - cl.gets, fair * cl.weight
      if need <= share then
        cl.gets = cl.gets + need
        left = left - need
      else
        cl.gets = cl.gets + share
        left = left - share
        next[#next + 1] = cl
      end
    end
    claims = next
  end
  return mine.gets
end

local unassigned = math.max(0, cap - assigned)
local learning = now < learn_until
local gets
if learning then
  gets = math.min(has, unassigned)
elseif alg == 'none' then
  gets = wants
elseif alg == 'static' and safe > 0 then
  gets = math.min(wants, safe, unassigned)
else
  gets = math.min(ALG[alg](weight), unassigned)
end
gets = math.max(gets, 0)
if gets ~= gets then gets = 0 end -- never NaN, whatever the inputs

local safe_out = safe
if safe_out == 0 then safe_out = cap / (#ids + 1) end

local exp = now + lease_us
redis.call('HSET', KEYS[2], me, fmt(wants) .. ' ' .. fmt(gets) .. ' ' .. fmt(weight) .. ' ' .. int(exp))
H[me] = {exp = exp}
keep(started + learn_us)

local l = 0
if learning then l = 1 end
return {OK, fmt(gets), now, lease_ns, refresh, fmt(safe_out), l, ver}
