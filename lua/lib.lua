-- limitd: the library every script starts with (store/ prepends it).
--
-- It mirrors limiter/ (engine.go, schedule.go, smooth.go, slice.go) operation for
-- operation, so that a limiter in Redis and the Go model give the same results
-- to the nanosecond. Lua numbers are doubles: every time here is relative to a
-- per-limiter epoch (ep, Unix microseconds, exact until year 2255), rebased
-- as time goes on, and every value the engine keeps stays within 2^51 of the
-- current time, so the arithmetic is exact integer arithmetic. Totals that grow
-- without bound (allocated, idle, permits, lateness) are only ever changed with
-- HINCRBY, which Redis does in 64-bit integers.

if redis.replicate_commands then redis.replicate_commands() end

local HORIZON = 1125899906842624 -- 2^50 ns, limiter.Horizon
local REBASE = 1099511627776     -- 2^40 ns (~18 min): move the epoch this often
local FAR = 4503599627370496     -- 2^52 ns (~52 days): see now_rel

local PARAMS = {'kind', 'whole', 'frac', 'den', 'maxn', 'burst', 'maxb', 'cap', 'init', 'warm',
  'stable', 'cool', 'thr', 'slope', 'ver'}
local STATE = {'st', 'ep', 'org', 'nx', 'pc', 'rem', 'sto'}

local function fmt(x) return string.format('%.17g', x) end

-- num is tonumber for the numbers limitd writes. Go's strconv 'g' and '%.17g'
-- write some numbers in exponent form without a point ("1e+06", "1e+21");
-- Redis's Lua reads them, but gopher-lua's tonumber (miniredis) returns nil for
-- any string without a '.' that is not an integer, so give it one.
local function num(s)
  local x = tonumber(s)
  if x == nil and type(s) == 'string' then x = tonumber((string.gsub(s, '[eE]', '.0e', 1))) end
  return x
end

local function time_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- load reads a limiter hash into a table L: numbers for params and state, nil if
-- the key does not exist.
local function load(key)
  local fields = {}
  for _, f in ipairs(PARAMS) do fields[#fields + 1] = f end
  for _, f in ipairs(STATE) do fields[#fields + 1] = f end
  local v = redis.call('HMGET', key, unpack(fields))
  if not v[1] then return nil end
  local L = {key = key, d_al = 0, d_id = 0, d_pm = 0, d_lt = 0}
  for i, f in ipairs(fields) do
    if f == 'kind' then L.kind = v[i] else L[f] = num(v[i]) or 0 end
  end
  return L
end

-- params_from copies engine parameters from ARGV (in PARAMS order) into L.
local function params_from(L, argv, i)
  for j, f in ipairs(PARAMS) do
    if f == 'kind' then L.kind = argv[i + j - 1] else L[f] = num(argv[i + j - 1]) end
  end
end

-- A big is an exact integer hi * 1e9 + lo (0 <= lo < 1e9, hi >= 0), for the
-- idle time of a limiter left alone for months, which a double cannot hold to
-- the ns.
local function big(hi, lo)
  local r = math.fmod(lo, 1e9)
  if r < 0 then r = r + 1e9 end
  return {hi = hi + (lo - r) / 1e9, lo = r}
end

-- big_gap is d * 1000 - c exactly, for integers 0 <= d < 2^53, |c| < 2^53.
local function big_gap(d, c)
  local dl, cl = math.fmod(d, 1e6), math.fmod(c, 1e9)
  if cl < 0 then cl = cl + 1e9 end
  return big((d - dl) / 1e6 - (c - cl) / 1e9, dl * 1000 - cl)
end

-- big_str is a big in decimal, for HINCRBY and replies.
local function big_str(b)
  local lo = string.format('%.0f', b.lo)
  if b.hi == 0 then return lo end
  return string.format('%.0f', b.hi) .. string.rep('0', 9 - #lo) .. lo
end

-- now_rel is the current time in ns relative to L's epoch; it starts the epoch
-- for a new limiter and rebases it once it has run for REBASE ns.
--
-- A limiter left alone for months would see nx - now fall below -2^53, where
-- a double no longer holds every ns. Nothing needs nx that far back: every use
-- of a schedule pointer behind now forfeits all but max_backlog (<= HORIZON) of
-- the gap as idle (forfeit), and a smooth limiter stores at most cap (<= 1e15
-- ns) of it (resync). So when nx would fall more than FAR behind, the part of
-- the gap beyond FAR is counted as idle at once, exactly (L.xid, a big), and
-- nx is kept FAR behind: the totals and every later result are those of the
-- unsettled gap.
local function now_rel(L, us)
  if L.st == 0 and L.ep == 0 then L.ep = us end
  local now = (us - L.ep) * 1000
  if now >= REBASE then
    if L.st == 1 and now - L.nx > FAR then
      L.xid = big_gap(us - L.ep, L.nx + FAR)
      L.nx = -FAR
      L.pc = -2 * HORIZON -- pc <= nx + 2 * HORIZON: it would be clamped below
    else
      L.nx = L.nx - now
      L.pc = math.max(L.pc - now, -2 * HORIZON) -- a pace that far back no longer matters
    end
    L.ep = us
    now = 0
  end
  return now
end

-- idle_delta is the idle time this call adds: d_id, plus the settled part of a
-- long gap (a decimal string then, exact past 2^53).
local function idle_delta(L)
  if not L.xid then return L.d_id end
  return big_str(big(L.xid.hi, L.xid.lo + L.d_id))
end

-- start is limiter.Params.Start.
local function start(L, now, us)
  if L.st == 1 then return end
  L.st, L.org, L.nx, L.pc, L.rem, L.sto = 1, us, now, now, 0, L.init
end

-- cost is limiter.Slice.Cost: n permits' whole ns and the new sub-ns carry.
local function cost(L, n, rem)
  local b = math.fmod(n, L.den)
  local a = (n - b) / L.den
  local t = rem + b * L.frac
  local r = math.fmod(t, L.den)
  return n * L.whole + a * L.frac + (t - r) / L.den, r
end

local function pace_of(L, c)
  if L.burst == 0 then return 0 end -- burst "inf" is stored as 0
  return math.ceil(c / L.burst)
end

local function forfeit(L, now, maxb)
  local late = now - L.nx
  if late > maxb then
    L.d_id = L.d_id + (late - maxb)
    L.nx = now - maxb
  end
end

local function resync(L, now)
  if now <= L.nx then return end
  local gap = now - L.nx
  local into = math.min(gap, L.cap - L.sto)
  L.sto = L.sto + into
  L.d_id = L.d_id + (gap - into)
  L.nx = now
end

local function permits_to_time(L, p) return L.stable + p * L.slope end

local function warm_wait(L, stored, take)
  local wait = 0
  local above = stored - L.thr
  if above > 0 then
    local take_above = math.min(above, take)
    local length = permits_to_time(L, above) + permits_to_time(L, above - take_above)
    wait = math.floor(take_above * length / 2.0)
    take = take - take_above
  end
  return wait + math.floor(L.stable * take)
end

local function stored_time(L)
  if L.warm == 0 then return L.sto end
  return math.floor(L.sto / L.cool * L.stable)
end

-- acquire is limiter.Params.acquire. It returns a result table with times
-- relative to L's epoch.
local function acquire(L, now, us, n, max_wait)
  if max_wait < 0 then max_wait = 0 end
  if max_wait > HORIZON then max_wait = HORIZON end
  start(L, now, us)
  if L.kind == 'smooth' then
    if L.nx - now > max_wait then
      local delay = L.nx - now
      return {granted = 0, delay = delay, retry = delay - max_wait, wait = stored_time(L)}
    end
    resync(L, now)
    local st, push = L.nx, 0
    if L.warm == 0 then
      local c, r = cost(L, n, L.rem)
      local from = math.min(c, L.sto)
      L.rem, L.sto, push = r, L.sto - from, c - from
    elseif L.sto == 0 then
      push, L.rem = cost(L, n, L.rem)
    else
      local stored = L.sto / L.cool
      local spend = math.min(n, stored)
      push = warm_wait(L, stored, spend) + math.floor((n - spend) * L.stable)
      if spend == stored then L.sto = 0 else L.sto = L.sto - math.min(L.sto, math.floor(spend * L.cool)) end
    end
    L.nx = L.nx + push
    L.d_al, L.d_pm = L.d_al + push, L.d_pm + n
    return {granted = 1, permits = n, sched = st, start = st, delay = st - now, late = 0,
      wait = stored_time(L)}
  end
  forfeit(L, now, L.maxb)
  local sched = L.nx
  local st = math.max(sched, L.pc, now)
  local delay = st - now
  if delay > max_wait then
    return {granted = 0, delay = delay, retry = delay - max_wait, wait = math.max(0, now - L.nx)}
  end
  local c, r = cost(L, n, L.rem)
  L.rem = r
  L.nx = L.nx + c
  L.pc = st + pace_of(L, c)
  local late = st - sched
  L.d_al, L.d_pm, L.d_lt = L.d_al + c, L.d_pm + n, L.d_lt + late
  return {granted = 1, permits = n, sched = sched, start = st, delay = delay, late = late,
    wait = math.max(0, now - L.nx)}
end

-- save writes L's state back and applies the totals' deltas.
local function save(L)
  redis.call('HSET', L.key, 'st', L.st, 'ep', fmt(L.ep), 'org', fmt(L.org), 'nx', fmt(L.nx),
    'pc', fmt(L.pc), 'rem', fmt(L.rem), 'sto', fmt(L.sto))
  if L.d_al ~= 0 then redis.call('HINCRBY', L.key, 'al', fmt(L.d_al)) end
  if L.xid then redis.call('HINCRBY', L.key, 'id', big_str(L.xid)) end
  if L.d_id ~= 0 then redis.call('HINCRBY', L.key, 'id', fmt(L.d_id)) end
  if L.d_pm ~= 0 then redis.call('HINCRBY', L.key, 'pm', fmt(L.d_pm)) end
  if L.d_lt ~= 0 then redis.call('HINCRBY', L.key, 'lt', fmt(L.d_lt)) end
end

local function save_params(L)
  local kv = {}
  for _, f in ipairs(PARAMS) do
    kv[#kv + 1] = f
    if f == 'kind' then kv[#kv + 1] = L.kind else kv[#kv + 1] = fmt(L[f]) end
  end
  redis.call('HSET', L.key, unpack(kv))
end

local function fresh(key)
  return {key = key, st = 0, ep = 0, org = 0, nx = 0, pc = 0, rem = 0, sto = 0,
    d_al = 0, d_id = 0, d_pm = 0, d_lt = 0}
end

-- retune is limiter.Reconfigure: settle time passed under L's old parameters,
-- then take the new ones (NP, a table of PARAMS) keeping the schedule.
local function retune(L, now, NP)
  if L.st == 1 then
    if L.whole ~= NP.whole or L.frac ~= NP.frac or L.den ~= NP.den then L.rem = 0 end
    if NP.kind == 'smooth' then
      resync(L, now)
      if L.cap == 0 and NP.warm == 1 then L.sto = NP.cap
      elseif L.cap == 0 then L.sto = 0
      else L.sto = math.min(NP.cap, math.floor(L.sto * NP.cap / L.cap)) end
    else
      forfeit(L, now, L.maxb)
    end
  end
  for _, f in ipairs(PARAMS) do L[f] = NP[f] end
end

-- reset is limiter.Params.Reset.
local function reset(L, now)
  if L.st ~= 1 then return end
  if L.kind == 'smooth' then
    resync(L, now)
    L.d_id = L.d_id + L.sto
    L.sto = L.init
    return
  end
  forfeit(L, now, 0)
  L.pc = math.max(L.pc, now)
end

-- resolve finds the limiter a call is about: the named limiter (KEYS[1]) if it
-- exists, else the template instance (KEYS[2]) when the caller passed the
-- matching template's parameters from ARGV[i] on. It returns L (nil: not found)
-- and whether L is a template instance. An instance is created on first use and
-- moved to a newer template version in place.
local function resolve(argv, i, us)
  local L = load(KEYS[1])
  if L then return L, false end
  if #argv < i + #PARAMS - 1 then return nil, false end
  local NP = {}
  params_from(NP, argv, i)
  L = load(KEYS[2])
  if not L then
    L = fresh(KEYS[2])
    for _, f in ipairs(PARAMS) do L[f] = NP[f] end
    L.new_params = true
  elseif NP.ver > L.ver then
    retune(L, now_rel(L, us), NP)
    L.new_params = true
  end
  return L, true
end

-- expire gives an instance a TTL: the time until its state is no different
-- from a fresh one (debt paid, stored time full or backlog forfeited), or the
-- template's idle_ttl when one is set.
local function expire(L, now, idle_ttl_ms)
  local ahead = math.max(0, L.nx - now, L.pc - now)
  local ttl = idle_ttl_ms
  if ttl <= 0 then
    local settle = L.maxb
    if L.kind == 'smooth' then settle = L.cap - L.sto end
    ttl = math.ceil((ahead + settle) / 1e6)
  end
  redis.call('PEXPIRE', L.key, math.max(1, ttl))
end

-- acquire_main is the body of acquire.lua and grant.lua.
-- ARGV: n, max_wait (ns; negative: forever), idle_ttl_ms, [template PARAMS...].
-- Reply: {code, granted, permits, ep, sched, start, delay, lateness, wait,
-- retry_after, version, now_us} with times relative to ep (Unix µs); a grant
-- adds {rem_before, next_after, whole, frac, den, burst, kind}. code 1 is ok, -1
-- not found, -2 permits out of range.
local function acquire_main(grant)
  local us = time_us()
  local L, inst = resolve(ARGV, 4, us)
  if not L then return {-1} end
  local n, max_wait = tonumber(ARGV[1]), tonumber(ARGV[2])
  if n < 1 or n > L.maxn or n ~= math.floor(n) then return {-2, L.maxn} end
  if max_wait < 0 then max_wait = HORIZON end
  local now = now_rel(L, us)
  local rem_before = L.rem
  if L.st ~= 1 and L.kind == 'schedule' then rem_before = 0 end
  local r = acquire(L, now, us, n, max_wait)
  save(L)
  if inst then
    if L.new_params then save_params(L) end
    expire(L, now, tonumber(ARGV[3]))
  end
  local reply = {1, r.granted, r.permits or 0, L.ep, r.sched or 0, r.start or 0, r.delay,
    r.late or 0, r.wait, r.retry or 0, L.ver, us}
  if grant then
    for _, v in ipairs({rem_before, L.nx, L.whole, L.frac, L.den, fmt(L.burst), L.kind}) do
      reply[#reply + 1] = v
    end
  end
  return reply
end
