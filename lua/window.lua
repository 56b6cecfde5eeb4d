-- window: the window engine (limiter/window.go) in Redis: at most limit
-- permits per period, in fixed windows aligned to the Unix epoch (period in
-- ns, a whole number of us), optionally sliding (the previous window's count
-- weighted by the part of it still inside the period). It follows lib.lua
-- (see Kinds there) and registers its row in KINDS.
--
-- It fits the rate kinds' state: next is the end of the current window
-- (relative to epoch, like every time here; always a whole number of us, so
-- that next and the differences below are exact up to 2^53 us * 1000),
-- stored the permits granted in it, rem those of the previous window
-- (sliding). A grant's start is now; wait is the permits left.
--
-- A calendar period (calendar ~= 0, in the zone whose FNV-32a is zone) has
-- boundaries only Go can compute (Redis's Lua has no zone rules), so the
-- store sends them (bounds.lua): the state keeps the current window's end
-- (next) and, when known, the end of the window after it (pace > next). A
-- call past both asks for them first (the engine's bounds: acquire_many's
-- A_BOUNDS, the other scripts' NEED_BOUNDS, with the script's TIME); the
-- store computes the windows around that time and calls bounds.lua, which
-- moves the limiter into them (set_bounds), then calls again.

local TWO53 = 9007199254740992
-- FULL is the count of a window a floor finds full (limiter's windowFull,
-- MaxWindowLimit: no limit is higher); MAX_COUNT the most a window counts
-- (limiter.MaxWindowCount, 2^52): a charged count stays exact up to it.
local FULL, MAX_COUNT = 4294967295, 4503599627370496

KINDS.window = {
  code = 3,
  params = 'limit:i7 period:i7 sliding:B calendar:B zone:I4',
  -- The engine and its helpers are made when a call first needs them: a
  -- script runs this file on every call (see Kinds in lib.lua).
  engine = function()
    -- muldiv is floor(a * b / c) and the remainder, exactly, for integers
    -- 0 <= a, b, c < 2^52 (c > 0) whose quotient is below 2^52: the product
    -- where it is exact, else b's bits, most significant first (double and add),
    -- with a reduced below c.
    local function muldiv(a, b, c)
      local p = a * b
      if p < TWO53 then
        local r = fmod(p, c)
        return (p - r) / c, r
      end
      local ra = fmod(a, c)
      local q, qq, r, bit = (a - ra) / c * b, 0, 0, 1
      while bit * 2 <= b do bit = bit * 2 end
      while bit >= 1 do
        qq, r = qq * 2, r * 2
        if r >= c then qq, r = qq + 1, r - c end
        if b >= bit then
          b, r = b - bit, r + ra
          if r >= c then qq, r = qq + 1, r - c end
        end
        bit = bit / 2
      end
      return q + qq, r
    end

    -- far_end tells whether the window that ended was the one before start when
    -- now_rel kept it at -FAR after a long gap (see now_rel): its end, relative to
    -- the rebased epoch (now 0), was -(FAR + the gap counted as idle, xidle).
    local function far_end(L, start)
      local x = L.xidle
      if not x then return false end
      local d = -start - 4503599627370496 -- FAR; exact: both are multiples of 8 below 2^55
      local lo = fmod(d, 4294967296)
      return lo == x[1] and (d - lo) / 4294967296 == x[2]
    end

    -- roll moves L to the window containing now once its window has ended
    -- (limiter.Params.roll). epoch + now / 1000 is Redis TIME (us): the epoch
    -- moves with a clock step as the Go model's state does.
    local function roll(L, now)
      if now < L.next then return end
      if L.calendar ~= 0 then
        if now < L.pace and L.pace > L.next then -- the window after: known
          L.d_idle = L.d_idle + (now - L.next)
          L.rem, L.stored, L.next = 0, 0, L.pace
        end
        return -- else the call asked for the bounds first (bounds)
      end
      local pu = L.period / 1000
      local us = L.epoch + now / 1000
      local start = (us - fmod(us, pu) - L.epoch) * 1000
      local prev = 0
      if L.sliding == 1 and (start == L.next or far_end(L, start)) then prev = min(L.stored, L.limit) end
      L.d_idle = L.d_idle + (now - L.next)
      L.rem, L.stored, L.next = prev, 0, start + L.period
    end

    -- used is the count a request at now is measured against (limiter.Params.used).
    local function used(L, now)
      if L.sliding == 0 or L.rem == 0 then return L.stored end
      local pu = L.period / 1000
      local e = (now - (L.next - L.period)) / 1000
      return L.stored + (muldiv(L.rem, pu - e, pu))
    end

    -- slide_wait is limiter.Params.slideWait: ns from a sliding window's start
    -- until a previous count prev weighs at most room.
    local function slide_wait(L, prev, room)
      if prev <= room then return 0 end
      local pu = L.period / 1000
      local q, r = muldiv(room + 1, pu, prev)
      if r > 0 then q = q + 1 end
      return (pu - q + 1) * 1000
    end

    -- retry_after is limiter.Params.retryAfter.
    local function retry_after(L, now, n)
      if L.sliding == 0 or n > L.limit then return L.next - now end
      local room = L.limit - n - L.stored
      if room >= 0 then return L.next - L.period + slide_wait(L, L.rem, room) - now end
      return L.next + slide_wait(L, min(L.stored, L.limit), L.limit - n) - now
    end

    return {
      acquire = function(L, now, n)
        roll(L, now)
        local u = used(L, now)
        if u + n > L.limit then
          local retry = retry_after(L, now, n)
          return 0, 0, 0, 0, retry, 0, max(0, L.limit - u), retry
        end
        L.stored = L.stored + n
        L.d_permits = L.d_permits + n
        L.last = now
        return 1, n, now, now, 0, 0, L.limit - used(L, now), 0
      end,
      -- a charge counts whatever the limit, up to MAX_COUNT (limiter's
      -- chargeWindow)
      charge = function(L, now, n)
        roll(L, now)
        local u = used(L, now)
        L.stored = min(L.stored + n, MAX_COUNT)
        L.d_permits = L.d_permits + n
        L.last = now
        return u + n <= L.limit, now, now, 0, min(u + n, MAX_COUNT)
      end,
      peek = function(L, now)
        roll(L, now)
        local left = max(0, L.limit - used(L, now))
        if left >= 1 then return left, 0 end
        return left, retry_after(L, now, 1)
      end,
      reset = function(L, now)
        roll(L, now)
        L.stored, L.rem = 0, 0
      end,
      -- the window and its count are kept (limiter's retune)
      retune = function(L, now, NP)
        roll(L, now)
        if NP.sliding == 0 then L.rem = 0 end
        if L.calendar ~= NP.calendar or L.zone ~= NP.zone then L.pace = L.next end
      end,
      -- bounds: the call needs the store's calendar bounds first
      -- (limiter.Params.NeedsBounds)
      bounds = function(L, now)
        return L.calendar ~= 0 and now >= L.next and not (now < L.pace and L.pace > L.next)
      end,
      -- set_bounds moves a calendar window that has ended into the window that
      -- ends at e (relative to epoch), followed by one ending at f
      set_bounds = function(L, now, e, f)
        if now < L.next then return end
        if now < L.pace and L.pace > L.next then roll(L, now) return end
        L.d_idle = L.d_idle + (now - L.next)
        L.rem, L.stored, L.next, L.pace = 0, 0, e, f
      end,
      counts = true,
      floor = function(L) L.stored, L.rem = FULL, 0 end,
      settle = function(L) -- a sliding window's count matters for one more period
        if L.sliding == 1 then return L.period end
        return 0
      end,
    }
  end,
}

-- [library only] The fast paths below serve the function library alone: a
-- script (EVAL) is given this file without them and decides windows on the
-- general path (see scriptText in lua/layout.go). In the library they see
-- all of lib.lua.

-- floor_moves is apply_floor's test without its change, for window_one: true
-- when the j-th floor of fl would move a started limiter whose epoch, now
-- and next (a window's end) are given (the general path then applies it).
local function floor_moves(fl, fj, us, epoch, now, next)
  local fus, ah
  if fl == floors_bin or byte(fl, 1) == 66 then -- floor_read's, once per call's floors
    floors_bin, fus, ah = fl, dec('<i8i8', fl, 16 * fj - 14)
    ah = ah - FAR
  else
    fus, ah = floor_read(fl, fj)
  end -- ah >= -FAR
  if fus == 0 or us - fus >= FLOOR_AGE then return false end
  if ah > 2 * HORIZON then ah = 2 * HORIZON end
  local at
  if us < fus then at = now + ah else at = (fus - epoch) * 1000 + ah end
  return at > now - FAR and at > next
end

-- window_one's layout: a window limiter's x up to last (X_LEAN; an
-- instance's up to expires, X_LEAN_I, at X_EXPIRES_AT), then X_TAIL, the
-- fields of REST it reads and writes (expires origin stored: the count is
-- stored); it rewrites x from next on (X_RUN and X_TAIL at X_RUN_AT, for
-- SETRANGE, which counts from 0). Written out, not derived, as schedule's
-- (see acquire_one there), and checked against the field groups by
-- check_layouts.
local CODE, X_SIZE, X_RUN_AT, X_EXPIRES_AT = 3, 149, '59', '112'
local X_LEAN = '<BBi7i7I4I4i7i7i7BBI4Bi7i7i7I4i7i7i7i7i7'
local X_LEAN_I = X_LEAN .. 'i7'
local X_RUN = '<i7i7I4i7i7i7i7i7'
local X_TAIL, X_TAIL_NAMES = 'i7i7i7', 'expires origin stored'
local X_READ, X_WRITE = X_LEAN .. X_TAIL, X_RUN .. X_TAIL
-- window_create's: the whole x in two (see create_one in schedule.lua), and
-- the template's params as acquire_many has them (X_OF's params).
local X_FULL_HEAD, X_FULL_TAIL = '<BBi7i7I4I4i7i7i7BBI4B', '<i7i7i7I4i7i7i7i7i7i7i7i7i4i4i4i4'
local X_PARAMS = 'kind whole frac den max_permits limit period sliding calendar zone version'
local P_WORDS = '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$'

-- fast_n reads a fast path's request n: the permits and whether it is a
-- charge (n travels as -1 - n), or nil for the general path (out of range:
-- its error; a charge of more than a window counts exactly, past MAX_COUNT
-- at once, or of a slice with a fraction, which a window never has).
local function fast_n(n, max_permits, whole, frac)
  n = SMALL[n] or tonumber(n)
  if n >= 1 and n <= max_permits and n % 1 == 0 then return n, false end
  if n >= 0 or n % 1 ~= 0 then return nil end
  n = -1 - n
  if frac ~= 0 or n * whole > HORIZON then return nil end
  return n, true
end

-- window_rec is the record of one request decided on a fixed window whose
-- count was stored before it (its window ended at next, relative to now):
-- the count after it, and the record (see decision_rec and charge_rec in
-- lib.lua, a counting kind's). An acquire takes n if they fit; a charge
-- (charged) takes them whatever is left, a check (0) nothing.
local function window_rec(stored, n, charged, limit, until_end)
  if charged then
    local count = stored + n
    local left, delay = limit - count, 0
    if left < 1 then
      delay = until_end
      if left < 0 then left = 0 end
    end
    local code = R_CHARGED_OVER
    if count <= limit then code = R_CHARGED_WITHIN end
    return count, code, delay, left, count
  end
  if stored + n > limit then
    local left = limit - stored
    if left < 0 then left = 0 end -- (a charge passed the limit)
    return stored, R_DENIED, until_end, left, until_end
  end
  stored = stored + n
  return stored, R_GRANTED, 0, limit - stored, 0
end

-- window_one is acquire_many's path for one acquire or charge on a named
-- fixed window (not sliding, not calendar) or a template instance of one
-- that has started, in numbers held in locals rather than a table L: the
-- same steps as the general path (now_rel without a rebase or a clock step,
-- the floor's test, roll, the count, save). It reads x up to stored and
-- rewrites from next on (SETRANGE), only when something changed; a change
-- that would carry into a high part goes the general way, and so does a
-- floor that moves the window. For a template instance, tver and idle_ttl
-- are as for acquire_one (schedule.lua); a fixed window settles at its end,
-- so its TTL is the time to its end, or idle_ttl when longer. It returns the
-- answer, or nil for the general path. With m (> 1) it decides the m
-- requests of one limiter whose pairs start at argv[q] (window_many), in
-- order, as acquire_group does: many callers of one hot counter in a batch.
local function window_one(key, x, n, max_wait, us, fl, fj, tver, idle_ttl, m, argv, q)
  local code, format, version, whole, frac, den, max_permits, limit, period, sliding, calendar, zone, started, epoch,
    next, pace, rem, allocated, idle, permits, lateness, last, expires, origin, stored = dec(X_READ, x)
  if code ~= CODE or format ~= FORMAT or (tver and version < tver) or sliding ~= 0 or calendar ~= 0 then return nil end
  local now = (us - epoch) * 1000
  if started ~= 1 or now >= REBASE or now < last or fl and floor_moves(fl, fj, us, epoch, now, next) then return nil end
  local changed = false
  if now >= next then -- roll: the window containing now
    local pu = period / 1000
    idle = idle + (now - next)
    rem, stored, next = 0, 0, (us - fmod(us, pu) - epoch) * 1000 + period
    changed = true
  end
  local recs, rc, delay, left, last_field
  if m then recs = {false} else m = 1 end
  for r = 1, m do
    if recs then n = argv[q + 2 * r - 2] end
    local charged, count
    n, charged = fast_n(n, max_permits, whole, frac)
    if not n then return nil end
    count, rc, delay, left, last_field = window_rec(stored, n, charged, limit, next - now)
    if count ~= stored or charged and n > 0 then
      if count > MAX_COUNT then return nil end
      stored, permits, last, changed = count, permits + n, now, true
      if permits >= LOW then return nil end -- a carry
    end
    if recs then recs[r + 1] = enc(R, rc, limit, delay, left, last_field) end
  end
  if idle >= LOW then return nil end -- a carry
  local answer
  if recs then
    recs[1] = enc(H, A_COUNTED, us, version, tver and 1 or 0, next - now)
    answer = table.concat(recs)
  else
    answer = enc(HR, A_COUNTED, us, version, tver and 1 or 0, next - now, rc, limit, delay, left, last_field)
  end
  local ttl
  if tver and (changed or idle_ttl > 0) then -- save's TTL (settle_ms), when it must be set anew
    local debt = next - now -- max(0, next - now, pace - now)
    if pace - now > debt then debt = pace - now end
    local now_ms = (us - us % 1000) / 1000
    local more
    ttl = ttl_ms(debt, idle_ttl, 0)
    if now_ms + ttl > expires then
      ttl, more = instance_ttl(ttl)
      expires = now_ms + more - 1
    else
      ttl = nil
    end
  end
  if changed then
    rcall('SETRANGE', key, X_RUN_AT, enc(X_WRITE, next, pace, rem, allocated, idle, permits, lateness, last, expires,
      origin, stored))
  elseif ttl then
    rcall('SETRANGE', key, X_EXPIRES_AT, enc('<i7', expires))
  end
  if ttl then rcall('PEXPIRE', key, ttl) end
  return answer
end

-- window_many is window_one for m (> 1) requests on one limiter (FAST_MANY
-- in lib.lua).
local function window_many(key, x, m, argv, q, us, fl, fj, tver, idle_ttl)
  return window_one(key, x, nil, nil, us, fl, fj, tver, idle_ttl, m, argv, q)
end

-- window_create is acquire_many's path for one acquire or charge on a
-- template instance of a fixed window that does not exist yet (and no named
-- limiter of its name): the instance made from the template's params
-- (X_PARAMS, as text), started at us in the window containing us, as
-- resolve, now_rel, start and roll make it, the request decided on it and
-- saved with its TTL (to the window's end, or idle_ttl). It returns the
-- answer, or nil for the general path (n out of range, a floor ahead of the
-- fresh window).
local function window_create(key, params, n, us, fl, fj, tver, idle_ttl)
  local p = made and made[params] -- (see "Readings kept between calls" in lib.lua)
  if not p then
    local _, whole, frac, den, max_permits, limit, period, sliding, calendar, zone = string.match(params, P_WORDS)
    if not zone then return nil end
    p = {whole + 0, frac + 0, max_permits + 0, limit + 0, period + 0, sliding + calendar}
    p[7] = enc(X_FULL_HEAD, CODE, FORMAT, tver, p[1], p[2], den + 0, p[3], p[4], p[5], sliding + 0, calendar + 0,
      zone + 0, 1) -- x up to started
    if made then
      if made[0] >= 256 then made = {[0] = 0} end
      made[params], made[0] = p, made[0] + 1
    end
  end
  if p[6] ~= 0 then return nil end -- sliding or calendar
  local charged, limit, period
  n, charged = fast_n(n, p[3], p[1], p[2])
  if not n then return nil end
  if fl then -- apply_floor's test at now 0, epoch us
    local fus, ah = floor_read(fl, fj)
    if fus ~= 0 and us - fus < FLOOR_AGE then
      if ah > 2 * HORIZON then ah = 2 * HORIZON end
      local at = ah
      if us >= fus then at = (fus - us) * 1000 + ah end
      if at > -FAR and at > 0 then return nil end
    end
  end
  limit, period = p[4], p[5]
  local pu = period / 1000
  local next = period - fmod(us, pu) * 1000 -- the window's end, relative to epoch us (now 0)
  local count, rc, delay, left, last_field = window_rec(0, n, charged, limit, next)
  local permits = 0
  if count ~= 0 or charged then permits = n end
  -- the fixed window's settle is 0: its TTL is its debt, the time to its end
  local ttl, more = instance_ttl(ttl_ms(next, idle_ttl, 0))
  -- code format version | params | started epoch | next pace rem allocated
  -- idle permits lateness last | expires origin stored | the totals' high
  -- parts
  local expires = (us - us % 1000) / 1000 + more - 1
  rcall('SET', key, p[7] .. enc(X_FULL_TAIL, us, next, 0, 0, 0, 0, permits, 0, 0, expires, us, count, 0, 0, 0, 0),
    'PX', ttl)
  return enc(HR, A_COUNTED, us, tver, 1, next, rc, limit, delay, left, last_field)
end

do -- the row's fast paths and the layouts they read (see Kinds in lib.lua)
  local K = KINDS.window
  KINDS.window.fast = window_one -- (spelled out: lua/layout.go finds a kind's fast path by it)
  K.fast_many, FAST_MANY[X_SIZE] = window_many, window_many
  K.lean_names = 'code format version whole frac den max_permits limit period sliding calendar zone started epoch next pace rem allocated idle permits lateness last'
  K.lean_code, K.lean_fmt, K.lean_run, K.lean_run_at, K.lean_size = CODE, X_LEAN, X_RUN, X_RUN_AT, X_SIZE
  K.lean_expires_at, K.lean_fmt_i, K.lean_tail, K.lean_tail_fmt = X_EXPIRES_AT, X_LEAN_I, X_TAIL_NAMES, X_TAIL
  K.create, K.lean_full, K.lean_params = window_create, {X_FULL_HEAD, X_FULL_TAIL}, X_PARAMS
end
-- [end library only]
