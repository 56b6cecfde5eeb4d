-- limitd: the library every script starts with (store/ prepends it).
--
-- It mirrors limiter/ (engine.go, schedule.go, smooth.go, slice.go) operation for
-- operation, so that a limiter in Redis and the Go model give the same results
-- to the nanosecond. Lua numbers are doubles: every time here is relative to a
-- per-limiter epoch (ep, Unix microseconds, exact until year 2255), rebased
-- as time goes on, and every value the engine keeps stays within 2^51 of the
-- current time, so the arithmetic is exact integer arithmetic. Totals that grow
-- without bound (allocated, idle, permits, lateness) are kept as exact 64-bit
-- integers in two parts (see "Storage").
--
-- Storage. Everything the scripts need of a rate limiter is one packed value,
-- x: kind code, version, engine parameters, state and totals. It is a string
-- key: a named limiter's state key (beside its hash of kind, ver and cfg, the
-- canonical config as JSON, which configure.lua writes for store/ to read), or
-- a template instance's key, with a TTL. So a call reads one value (GET, or
-- MGET for many limiters) and writes one (SET, SET ... PX, or SETRANGE for
-- the bytes that changed).
--
--   x = code ver | params | st ep | nx pc rem | al id pm lt (low parts) |
--   org sto | al id pm lt (high parts), where code is 1 (schedule) or 2
--   (smooth), params are whole frac den maxn burst maxb (schedule) or whole
--   frac den maxn cap init warm cool thr slope (smooth), and the totals al id
--   pm lt are each an int64 in two parts. What one acquire changes (nx pc rem
--   and the low parts) is one run of bytes, with only what it reads before
--   it, so that acquire_one reads a prefix and rewrites only that run.
--
-- A share or concurrency limiter's state key (configure_lease.lua) holds its
-- kind's name as x, so that these scripts answer {-5, kind} for it in the
-- same read.
--
-- Where Redis's Lua has the struct library (every real Redis), x is
-- little-endian binary: doubles ('d') for fractional values, two's-complement
-- integers of 7 bytes ('i7', +-2^55) for times and counts, which all fit
-- (|x| < 2^53), and 4 bytes ('I4', 'i4') for the slice's fraction,
-- denominator and carry (<= 2^26). A total is the int64 hi * 2^32 + lo, its
-- low part lo 'i7' (0 <= lo < 2^51) with the others' low parts, its high part
-- hi 'i4' at the end. Where struct
-- is missing (gopher-lua in miniredis) the same numbers are decimal text, one
-- space apart ('%.17g', exact). A server always has struct or never does, so
-- it only ever sees one form; store/ reads both (decodeStored). The code comes
-- first in both forms: byte 1 or 2 in binary, the digit '1' or '2' in text.
-- The slice as a double (stable) is not stored but computed as
-- limiter.Slice.Float does, whole + frac / den, the same two IEEE operations
-- with the same result.

-- Globals. A script runs this file top to bottom on every call. In a Redis
-- Function library (lua.Library: FUNCTION LOAD, Redis >= 7) the top level runs
-- once, where Redis offers no global but a bare redis table, and the library's
-- functions then serve every call: so the top level only defines; init reads
-- the globals, at the end of this file for a script, on a function's first
-- call for a library (`if not rcall then init() end`).

local HORIZON = 1125899906842624 -- 2^50 ns, limiter.Horizon
local REBASE = 1099511627776     -- 2^40 ns (~18 min): move the epoch this often
local FAR = 4503599627370496     -- 2^52 ns (~52 days): see now_rel
local B32 = 4294967296           -- 2^32: the split of a total
local LOW = 2251799813685248     -- 2^51: a total's low part stays below (totals)
local SETTLE = 1125899906842624  -- 2^50: changes acquire_group lets add up (totals)

local floor, fmod, max, min, rcall

-- enc(layout, ...) packs numbers; dec(layout, s) returns them (struct.unpack
-- adds the next position, which callers drop). See init.
local enc, dec

local PARAMS = {'kind', 'whole', 'frac', 'den', 'maxn', 'burst', 'maxb', 'cap', 'init', 'warm',
  'stable', 'cool', 'thr', 'slope', 'ver'}

-- The packed layouts of x (struct formats; the text form has the same
-- numbers): code ver, params, then the state and totals (X_STATE, 84 bytes).
local X_STATE = 'Bi7' .. 'i7i7i4' .. 'i7i7i7i7' .. 'i7i7' .. 'i4i4i4i4'
local X_SCHEDULE = '<Bi7' .. 'i7I4I4i7di7' .. X_STATE     -- 129 bytes
local X_SIZE = 129
local X_SMOOTH = '<Bi7' .. 'i7I4I4i7i7i7Bddd' .. X_STATE -- 153 bytes
-- acquire_one reads a schedule limiter's x up to the low parts of its totals
-- (X_LEAN) and rewrites bytes X_RUN_AT to X_RUN_AT + 45 (X_RUN: nx pc rem
-- and the low parts).
local X_LEAN = '<Bi7i7I4I4i7di7Bi7i7i7i4i7i7i7i7'
local X_RUN = '<i7i7i4i7i7i7i7'
local X_RUN_AT = 54
local X_RUN_OFFSET = '53' -- X_RUN_AT for SETRANGE, which counts from 0
-- H heads acquire_many's answer for a limiter: code 1, now_us, version,
-- instance; R is one decision: code, sched and start (relative to now), wait,
-- retry_after. A grant's delay is its start, its lateness start - sched; a
-- denial's delay is in start.
local H = '<Bi7i7B'
local R = '<Bi7i7i7i7'
local HR = H .. 'Bi7i7i7i7' -- an answer with one R

-- TEXT is 1 where x and replies are text (no struct), else 0; SEP joins packed
-- records: nothing in binary, a space in text.
local TEXT, SEP = 0, ''

local function fmt(x) return string.format('%.17g', x) end

-- SMALL holds the arguments most acquires take (one permit, no wait or
-- forever), so that reading them costs a table lookup, not tonumber's strtod.
local SMALL = {['0'] = 0, ['1'] = 1, ['-1'] = -1}

-- num is tonumber for the numbers limitd writes. Go's strconv 'g' and '%.17g'
-- write some numbers in exponent form without a point ("1e+06", "1e+21");
-- Redis's Lua reads them, but gopher-lua's tonumber (miniredis) returns nil for
-- any string without a '.' that is not an integer, so give it one.
local function num(s)
  local x = tonumber(s)
  if x == nil and type(s) == 'string' then x = tonumber((string.gsub(s, '[eE]', '.0e', 1))) end
  return x
end

-- init reads the globals (see above) and picks the packed form: binary where
-- Lua has struct, text otherwise.
local function init()
  if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5: effects, for TIME
  floor, fmod, max, min = math.floor, math.fmod, math.max, math.min
  rcall = redis.call
  local struct = rawget(_G, 'struct')
  if struct then
    enc, dec = struct.pack, struct.unpack
    return
  end
  TEXT, SEP = 1, ' '
  enc = function(_, ...)
    return (string.format(string.rep('%.17g ', select('#', ...)), ...):sub(1, -2))
  end
  dec = function(_, s)
    local t, n = {}, 0
    for w in string.gmatch(s, '%S+') do
      n = n + 1
      t[n] = num(w)
    end
    return unpack(t, 1, n)
  end
end

local function time_us()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- load reads a limiter's x at key (inst: a template instance's) into a table
-- L, or decodes it when the caller has read it already (false: no such key):
-- numbers for params, state and totals, nil if the key does not exist. A
-- limiter of a kind without a schedule (share, concurrency) is {key, kind,
-- other = true}. L.x keeps what was read, so that save writes only a change.
local function load(key, inst, x)
  if x == nil then x = rcall('GET', key) end
  if not x then return nil end
  local code = string.byte(x, 1)
  -- One table constructor with every field: adding fields later would grow
  -- (rehash) the table, which costs more than the rest of a load.
  if code == 1 or code == 49 then
    local _, ver, whole, frac, den, maxn, burst, maxb, st, ep, nx, pc, rem, al, id, pm, lt,
      org, sto, alh, idh, pmh, lth = dec(X_SCHEDULE, x)
    return {key = key, inst = inst, x = x, kind = 'schedule', ver = ver, whole = whole, frac = frac,
      den = den, maxn = maxn, burst = burst, maxb = maxb, cap = 0, init = 0, warm = 0, cool = 0,
      thr = 0, slope = 0, stable = whole + frac / den,
      st = st, ep = ep, org = org, nx = nx, pc = pc, rem = rem, sto = sto,
      al = al, alh = alh, id = id, idh = idh, pm = pm, pmh = pmh, lt = lt, lth = lth,
      d_al = 0, d_id = 0, d_pm = 0, d_lt = 0}
  elseif code == 2 or code == 50 then
    local _, ver, whole, frac, den, maxn, cap, initial, warm, cool, thr, slope,
      st, ep, nx, pc, rem, al, id, pm, lt, org, sto, alh, idh, pmh, lth = dec(X_SMOOTH, x)
    return {key = key, inst = inst, x = x, kind = 'smooth', ver = ver, whole = whole, frac = frac,
      den = den, maxn = maxn, burst = 0, maxb = 0, cap = cap, init = initial, warm = warm, cool = cool,
      thr = thr, slope = slope, stable = whole + frac / den,
      st = st, ep = ep, org = org, nx = nx, pc = pc, rem = rem, sto = sto,
      al = al, alh = alh, id = id, idh = idh, pm = pm, pmh = pmh, lt = lt, lth = lth,
      d_al = 0, d_id = 0, d_pm = 0, d_lt = 0}
  end
  -- a share or concurrency limiter: x is its kind (configure_lease.lua)
  return {key = key, kind = x, ver = 0, other = true}
end

-- params_from copies engine parameters from ARGV (in PARAMS order) into L.
local function params_from(L, argv, i)
  for j, f in ipairs(PARAMS) do
    if f == 'kind' then L.kind = argv[i + j - 1] else L[f] = num(argv[i + j - 1]) end
  end
end

-- tpl_params returns a template's parameters as a table of PARAMS. A
-- template (tpl) is {ver = its version} and either argv and i (PARAMS in
-- argv from i on) or text (PARAMS one space apart, acquire_many).
local function tpl_params(tpl)
  local NP = {}
  if tpl.argv then
    params_from(NP, tpl.argv, tpl.i)
  else
    local words = {}
    for w in string.gmatch(tpl.text, '%S+') do words[#words + 1] = w end
    params_from(NP, words, 1)
  end
  return NP
end

-- carry brings the low part of a total back into [0, 2^32), exactly (|lo| <
-- 2^53).
local function carry(lo, hi)
  local r = fmod(lo, B32)
  if r < 0 then r = r + B32 end
  return r, hi + (lo - r) / B32
end

-- big_gap is d * 1000 - c exactly as {lo, hi} (hi * 2^32 + lo), for integers
-- 0 <= d < 2^53, |c| < 2^53: the idle time of a limiter left alone for
-- months, which a double cannot hold to the ns.
local function big_gap(d, c)
  local dl, cl = fmod(d, B32), fmod(c, B32)
  local lo, hi = carry(dl * 1000 - cl, (d - dl) / B32 * 1000 - (c - cl) / B32)
  return {lo, hi}
end

-- totals are L's totals with this call's changes, as al, al_hi, id, id_hi,
-- pm, pm_hi, lt, lt_hi (each total hi * 2^32 + lo, 0 <= lo < LOW). A low
-- part is carried into the high one only once it reaches LOW, so most calls
-- change low parts only (acquire_one). Exact while lo plus the changes stays
-- below 2^53: one acquire adds less than 2^52 + 2^41 (a forfeit of up to FAR
-- beyond the rebase), and acquire_group settles more at SETTLE.
local function totals(L)
  local al, alh, id, idh, pm, pmh, lt, lth = L.al, L.alh, L.id, L.idh, L.pm, L.pmh, L.lt, L.lth
  local x = L.xid
  if x then id, idh = id + x[1], idh + x[2] end
  al, id, pm, lt = al + L.d_al, id + L.d_id, pm + L.d_pm, lt + L.d_lt
  if al >= LOW or al < 0 then al, alh = carry(al, alh) end
  if id >= LOW or id < 0 then id, idh = carry(id, idh) end
  if pm >= LOW or pm < 0 then pm, pmh = carry(pm, pmh) end
  if lt >= LOW or lt < 0 then lt, lth = carry(lt, lth) end
  return al, alh, id, idh, pm, pmh, lt, lth
end

-- now_rel is the current time in ns relative to L's epoch; it starts the epoch
-- for a new limiter and rebases it once it has run for REBASE ns.
--
-- A limiter left alone for months would see nx - now fall below -2^53, where
-- a double no longer holds every ns. Nothing needs nx that far back: every use
-- of a schedule pointer behind now forfeits all but max_backlog (<= HORIZON) of
-- the gap as idle (forfeit), and a smooth limiter stores at most cap (<= 1e15
-- ns) of it (resync). So when nx would fall more than FAR behind, the part of
-- the gap beyond FAR is counted as idle at once, exactly (L.xid, {lo, hi}), and
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
      L.pc = max(L.pc - now, -2 * HORIZON) -- a pace that far back no longer matters
    end
    L.ep = us
    now = 0
  end
  return now
end

-- start is limiter.Params.Start.
local function start(L, now, us)
  if L.st == 1 then return end
  L.st, L.org, L.nx, L.pc, L.rem, L.sto = 1, us, now, now, 0, L.init
end

-- cost is limiter.Slice.Cost: n permits' whole ns and the new sub-ns carry.
local function cost(L, n, rem)
  local den = L.den
  local b = fmod(n, den)
  local t = rem + b * L.frac
  local r = fmod(t, den)
  return n * L.whole + (n - b) / den * L.frac + (t - r) / den, r
end

local function forfeit(L, now, maxb)
  local late = now - L.nx
  if late > maxb then
    L.d_id = L.d_id + (late - maxb)
    L.nx = now - maxb
  end
end

local function resync(L, now)
  local nx = L.nx
  if now <= nx then return end
  local gap = now - nx
  local into = min(gap, L.cap - L.sto)
  L.sto = L.sto + into
  L.d_id = L.d_id + (gap - into)
  L.nx = now
end

local function stored_time(L)
  if L.warm == 0 then return L.sto end
  return floor(L.sto / L.cool * L.stable)
end

-- acquire is limiter.Params.acquire. It returns granted (1 or 0), permits,
-- scheduled, start, delay, lateness, wait and retry_after, times relative to
-- L's epoch.
local function acquire(L, now, us, n, max_wait)
  if max_wait < 0 then max_wait = 0 end
  if max_wait > HORIZON then max_wait = HORIZON end
  start(L, now, us)
  if L.kind == 'smooth' then
    if L.nx - now > max_wait then
      local delay = L.nx - now
      return 0, 0, 0, 0, delay, 0, stored_time(L), delay - max_wait
    end
    resync(L, now)
    local st, push = L.nx, 0
    if L.warm == 0 then
      local c, r = cost(L, n, L.rem)
      local from = min(c, L.sto)
      L.rem, L.sto, push = r, L.sto - from, c - from
    elseif L.sto == 0 then
      push, L.rem = cost(L, n, L.rem)
    else
      -- Guava's SmoothWarmingUp.storedPermitsToWaitTime, then the rest at
      -- the stable rate.
      local stable, stored = L.stable, L.sto / L.cool
      local spend = min(n, stored)
      local take, wait = spend, 0
      local above = stored - L.thr
      if above > 0 then
        local take_above = min(above, take)
        local length = (stable + above * L.slope) + (stable + (above - take_above) * L.slope)
        wait = floor(take_above * length / 2.0)
        take = take - take_above
      end
      push = wait + floor(stable * take) + floor((n - spend) * stable)
      if spend == stored then L.sto = 0 else L.sto = L.sto - min(L.sto, floor(spend * L.cool)) end
    end
    L.nx = L.nx + push
    L.d_al, L.d_pm = L.d_al + push, L.d_pm + n
    return 1, n, st, st, st - now, 0, stored_time(L), 0
  end
  forfeit(L, now, L.maxb)
  local sched = L.nx
  local st = max(sched, L.pc, now)
  local delay = st - now
  if delay > max_wait then
    return 0, 0, 0, 0, delay, 0, max(0, now - sched), delay - max_wait
  end
  local c, r = cost(L, n, L.rem)
  L.rem = r
  L.nx = sched + c
  if L.burst == 0 then L.pc = st else L.pc = st + math.ceil(c / L.burst) end -- burst "inf" is stored as 0
  local late = st - sched
  L.d_al, L.d_pm, L.d_lt = L.d_al + c, L.d_pm + n, L.d_lt + late
  return 1, n, sched, st, delay, late, max(0, now - L.nx), 0
end

-- settle moves this call's changes into L's totals.
local function settle(L)
  L.al, L.alh, L.id, L.idh, L.pm, L.pmh, L.lt, L.lth = totals(L)
  L.d_al, L.d_id, L.d_pm, L.d_lt, L.xid = 0, 0, 0, 0, nil
end

-- pack returns L's x (see Storage), settling this call's changes into its
-- totals.
local function pack(L)
  settle(L)
  local al, alh, id, idh, pm, pmh, lt, lth = L.al, L.alh, L.id, L.idh, L.pm, L.pmh, L.lt, L.lth
  if L.kind == 'smooth' then
    return enc(X_SMOOTH, 2, L.ver, L.whole, L.frac, L.den, L.maxn, L.cap, L.init, L.warm, L.cool,
      L.thr, L.slope, L.st, L.ep, L.nx, L.pc, L.rem, al, id, pm, lt, L.org, L.sto, alh, idh, pmh, lth)
  end
  return enc(X_SCHEDULE, 1, L.ver, L.whole, L.frac, L.den, L.maxn, L.burst, L.maxb,
    L.st, L.ep, L.nx, L.pc, L.rem, al, id, pm, lt, L.org, L.sto, alh, idh, pmh, lth)
end

-- settle_ms is how long an instance must be kept: until its state is no
-- different from a fresh one (debt paid, stored time full or backlog
-- forfeited), or the template's idle_ttl when one is set.
local function settle_ms(L, now, idle_ttl_ms)
  if idle_ttl_ms > 0 then return idle_ttl_ms end
  local settle = L.maxb
  if L.kind == 'smooth' then settle = L.cap - L.sto end
  return max(1, math.ceil((max(0, L.nx - now, L.pc - now) + settle) / 1e6))
end

-- save writes L back if this call changed it: a named limiter's state key, or
-- an instance's key with a TTL, settle_ms(L, now, idle_ttl_ms). Without now
-- an instance keeps the TTL it has. An unchanged instance with an idle_ttl
-- gets it anew (every use counts); one without keeps its TTL, which still
-- covers an unchanged state.
local function save(L, now, idle_ttl_ms)
  local x = pack(L)
  local changed = x ~= L.x
  L.x = x
  if not L.inst then
    if changed then rcall('SET', L.key, x) end
    return
  end
  if not now then
    if not changed then return end
    local ttl = rcall('PTTL', L.key)
    if ttl > 0 then rcall('SET', L.key, x, 'PX', ttl) else rcall('SET', L.key, x) end
    return
  end
  local ttl = settle_ms(L, now, idle_ttl_ms)
  if changed then
    rcall('SET', L.key, x, 'PX', ttl)
  elseif idle_ttl_ms > 0 then
    rcall('PEXPIRE', L.key, ttl)
  end
end

local function fresh(key, inst)
  return {key = key, inst = inst, st = 0, ep = 0, org = 0, nx = 0, pc = 0, rem = 0, sto = 0,
    al = 0, alh = 0, id = 0, idh = 0, pm = 0, pmh = 0, lt = 0, lth = 0,
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
      else L.sto = min(NP.cap, floor(L.sto * NP.cap / L.cap)) end
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
  L.pc = max(L.pc, now)
end

-- resolve finds the limiter a call is about: the named limiter (its state
-- key, key) if it exists, else the template instance (ikey) when a template
-- matches the name (tpl, see tpl_params). It returns L (nil: not found),
-- which is an instance when L.inst. An instance is created on first use and
-- moved to a newer template version in place; the template's parameters are
-- only read then. x and ix are key's and ikey's x if the caller has read them.
local function resolve(key, ikey, tpl, us, x, ix)
  local L = load(key, false, x)
  if L then return L end
  if not tpl then return nil end
  L = load(ikey, true, ix)
  if L and (L.other or tpl.ver <= L.ver) then return L end
  local NP = tpl_params(tpl)
  if not L then
    L = fresh(ikey, true)
    for _, f in ipairs(PARAMS) do L[f] = NP[f] end
  else
    retune(L, now_rel(L, us), NP)
  end
  return L
end

-- resolve_keys is resolve for the scripts that take KEYS = {limiter,
-- instance} and the template's parameters, if any, from argv[i] on.
local function resolve_keys(keys, argv, i, us)
  local tpl
  if #argv >= i + #PARAMS - 1 then tpl = {argv = argv, i = i, ver = tonumber(argv[i + #PARAMS - 1])} end
  return resolve(keys[1], keys[2], tpl, us)
end

-- grant_main is the body of grant.lua: n permits for a client pool, with
-- what the pool needs to place each permit and to hand unused ones back.
-- ARGV: n, max_wait (ns; negative: forever), idle_ttl_ms, [template PARAMS...].
-- Reply: {code, granted, permits, ep, sched, start, delay, lateness, wait,
-- retry_after, version, now_us, instance, rem_before, next_after, whole,
-- frac, den, burst, kind} with times relative to ep (Unix us) and instance 1
-- when a template instance answered. code 1 is ok, -1 not found, -2 permits
-- out of range ({-2, max}), -5 a limiter of another kind ({-5, kind}).
local function grant_main(keys, argv)
  local us = time_us()
  local L = resolve_keys(keys, argv, 4, us)
  if not L then return {-1} end
  if L.other then return {-5, L.kind} end
  local n, max_wait = tonumber(argv[1]), tonumber(argv[2])
  if n < 1 or n > L.maxn or n ~= floor(n) then return {-2, L.maxn} end
  if max_wait < 0 then max_wait = HORIZON end
  local now = now_rel(L, us)
  local rem_before = L.rem
  if L.st ~= 1 and L.kind == 'schedule' then rem_before = 0 end
  local granted, permits, sched, st, delay, late, wait, retry = acquire(L, now, us, n, max_wait)
  save(L, now, tonumber(argv[3]))
  return {1, granted, permits, L.ep, sched, st, delay, late, wait, retry, L.ver, us, L.inst and 1 or 0,
    rem_before, L.nx, L.whole, L.frac, L.den, fmt(L.burst), L.kind}
end

-- acquire_one is acquire_many's path for its most frequent call, one acquire
-- on a named schedule limiter that has started, in numbers held in locals
-- rather than a table L: the same steps as acquire (now_rel without a
-- rebase, forfeit, cost, pace) and save. It reads x
-- only up to the low parts of the totals and rewrites only what changes
-- (X_LEAN, X_RUN: SETRANGE), so a change that would carry into a high part
-- goes the general way. x is key's x if the caller has read it. It returns
-- the answer, or nil and x (false: no such key) for the general path.
local function acquire_one(key, n, max_wait, us, x)
  if x == nil then x = rcall('GET', key) end
  -- a schedule limiter's x is X_SIZE bytes long (a smooth one's longer, a
  -- kind's name shorter) and starts with its code, 1
  if not x or TEXT == 1 or #x ~= X_SIZE then return nil, x end
  local code, ver, whole, frac, den, maxn, burst, maxb, st, ep, nx, pc, rem, al, id, pm, lt = dec(X_LEAN, x)
  if code ~= 1 then return nil, x end
  local now = (us - ep) * 1000
  n, max_wait = SMALL[n] or tonumber(n), SMALL[max_wait] or tonumber(max_wait)
  if st ~= 1 or now >= REBASE or n < 1 or n > maxn or n % 1 ~= 0 then return nil, x end
  if max_wait < 0 or max_wait > HORIZON then max_wait = HORIZON end
  local late = now - nx
  if late > maxb then -- forfeit
    id = id + (late - maxb)
    nx = now - maxb
  end
  local sched = nx
  local start = sched -- max(sched, pc, now)
  if pc > start then start = pc end
  if now > start then start = now end
  local delay = start - now
  local answer
  if delay > max_wait then
    local wait = now - sched
    if wait < 0 then wait = 0 end
    answer = enc(HR, 1, us, ver, 0, 0, 0, delay, wait, delay - max_wait)
    if late <= maxb then return answer end -- a denial that forfeited nothing changes nothing
  else
    local c -- cost
    if frac == 0 then
      c = n * whole
    else
      local b = fmod(n, den)
      local t = rem + b * frac
      rem = fmod(t, den)
      c = n * whole + (n - b) / den * frac + (t - rem) / den
    end
    nx = sched + c
    if burst == 0 then pc = start else pc = start + math.ceil(c / burst) end
    al, pm, lt = al + c, pm + n, lt + (start - sched)
    local wait = now - nx
    if wait < 0 then wait = 0 end
    answer = enc(HR, 1, us, ver, 0, 1, sched - now, delay, wait, 0)
  end
  if al >= LOW or id >= LOW or pm >= LOW or lt >= LOW then return nil, x end -- a carry
  rcall('SETRANGE', key, X_RUN_OFFSET, enc(X_RUN, nx, pc, rem, al, id, pm, lt))
  return answer
end

-- acquire_group is acquire_many's answer for the m requests of one limiter,
-- whose pairs start at argv[q] (ikey, tpl and idle_ttl: its instance key,
-- template and idle TTL, if a template matches; x and ix: the x of its keys,
-- if read already).
local function acquire_group(key, ikey, tpl, idle_ttl, m, argv, q, us, x, ix)
  local L = resolve(key, ikey, tpl, us, x, ix)
  if not L then return enc('<B', 3) end
  if L.other then -- its kind: a length and the name (text: the name)
    if TEXT == 1 then return '4 ' .. L.kind end
    return enc('<BB', 4, #L.kind) .. L.kind
  end
  local now = now_rel(L, us)
  local recs, decided = {enc(H, 1, us, L.ver, L.inst and 1 or 0)}, false
  for r = 1, m do
    local n, max_wait = argv[q], argv[q + 1]
    n, max_wait = SMALL[n] or tonumber(n), SMALL[max_wait] or tonumber(max_wait)
    q = q + 2
    if n < 1 or n > L.maxn or n ~= floor(n) then
      recs[r + 1] = enc(R, 2, L.maxn, 0, 0, 0)
    else
      if max_wait < 0 then max_wait = HORIZON end
      local granted, _, sched, st, delay, _, wait, retry = acquire(L, now, us, n, max_wait)
      if granted == 1 then
        recs[r + 1] = enc(R, 1, sched - now, st - now, wait, retry)
      else
        recs[r + 1] = enc(R, 0, 0, delay, wait, retry)
      end
      decided = true
      -- Many requests' changes could pass 2^53 together (totals).
      if L.d_al >= SETTLE or L.d_id >= SETTLE or L.d_pm >= SETTLE or L.d_lt >= SETTLE then settle(L) end
    end
  end
  -- Requests that were all refused change nothing (an instance is neither
  -- created nor moved to a new template version).
  if decided then save(L, now, idle_ttl) end
  return table.concat(recs, SEP)
end

-- acquire_single is the answer to one acquire on one limiter without a
-- template, whose pair is argv[a], argv[a + 1]: acquire_one's, else the
-- general path's.
local function acquire_single(key, argv, a, us, x)
  local answer
  answer, x = acquire_one(key, argv[a], argv[a + 1], us, x)
  return answer or acquire_group(key, nil, nil, 0, 1, argv, a, us, x)
end

-- acquire_many is the body of acquire.lua: any number of acquires on any
-- number of limiters, decided at one Redis time, each limiter read and written
-- once. A limiter's requests are decided in order, as if they came one after
-- the other at that time.
-- KEYS: each limiter's state key, followed by its instance key when a
-- template matches its name.
-- ARGV: per limiter, in KEYS order, a head then m pairs n, max_wait (ns;
-- negative: forever). The head is m, or when a template matches, one string:
-- m, the template's idle_ttl_ms and its PARAMS (ver last), one space apart.
-- One acquire on one limiter without a template may come as the pair alone.
-- Reply: one string, the limiters' answers in KEYS order. An answer is H (1,
-- now_us, version, instance 0 or 1), then one R per request: code (0 denied,
-- 1 granted, 2 n out of range, with the maximum as sched), sched, start
-- (relative to now), wait, retry_after; or 3 (not found); or 4 (a limiter of
-- another kind) and its kind's name, after its length. In text (no struct)
-- the numbers and the name are one space apart.
local function acquire_many(keys, argv)
  local us = time_us()
  if #argv == 2 then return acquire_single(keys[1], argv, 1, us) end -- the pair alone
  local xs = {} -- every key's x, read at once for many limiters
  if #keys > 1 then xs = rcall('MGET', unpack(keys)) end
  local out = {}
  local j, k, a, na = 0, 1, 1, #argv
  while a <= na do
    j = j + 1
    local head = argv[a]
    if head == '1' then -- one acquire, no template
      out[j] = acquire_single(keys[k], argv, a + 1, us, xs[k])
      k, a = k + 1, a + 3
    else
      local m, tpl, idle_ttl, ikey = tonumber(head), nil, 0, nil
      if not m then
        local ms, ttl, params = string.match(head, '^(%S+) (%S+) (.*)$')
        m, idle_ttl, ikey = tonumber(ms), tonumber(ttl), keys[k + 1]
        tpl = {text = params, ver = tonumber(string.match(params, '(%S+)$'))}
      end
      out[j] = acquire_group(keys[k], ikey, tpl, idle_ttl, m, argv, a + 1, us, xs[k], ikey and xs[k + 1])
      k, a = k + (ikey and 2 or 1), a + 1 + 2 * m
    end
  end
  if j == 1 then return out[1] end
  return table.concat(out, SEP)
end

if not redis.register_function then init() end -- a script, not a library (see Globals)
