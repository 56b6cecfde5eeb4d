-- schedule: the schedule engine (limiter/schedule.go) in Redis: EngineBlock's
-- strict limiter and nosqlbench's hybrid limiter. The schedule pointer next
-- advances one slice per permit; time that passes without a caller becomes
-- backlog, which callers may catch up at burst x rate (pace), and backlog
-- beyond max_backlog is forfeited as idle time. It follows lib.lua (see
-- Kinds there) and registers its row in KINDS.

-- AT_ONCE is limiter.AtOnce: how early a start of burst inf may be (at
-- most max_backlog early), so that requests decided at one Redis time are at
-- once (see start_at in the engine, and limiter/schedule.go).
local AT_ONCE = 1000000

-- forfeit moves backlog beyond maxb to idle: nobody may catch it up.
local function forfeit(L, now, maxb)
  local late = now - L.next
  if late > maxb then
    L.d_idle = L.d_idle + (late - maxb)
    L.next = now - maxb
  end
end

-- acquire_one's layout, a schedule limiter's x up to last (X_LEAN; an
-- instance's up to expires, X_LEAN_I, at X_EXPIRES_AT), which
-- it rewrites from next on (X_RUN at X_RUN_AT, for SETRANGE, which counts
-- from 0), and X_SIZE, a schedule limiter's size. They are written out, not
-- derived, because they are what acquire_one's locals read;
-- check_layouts (lib.lua) checks them against the field groups (on a
-- library's first call, and in store's tests), so a change of the groups that
-- they miss is an error at once, never a misread.
local CODE, X_SIZE, X_RUN_AT, X_EXPIRES_AT = 1, 144, '54', '107'
local X_ORIGIN_AT = 115 -- origin's first byte (dec counts from 1), read only for a floor (see acquire_one)
local X_LEAN = '<BBi7i7I4I4i7di7Bi7i7i7I4i7i7i7i7i7'
local X_LEAN_I = X_LEAN .. 'i7' -- an instance's: and expires, right after last
local X_RUN = '<i7i7I4i7i7i7i7i7'
-- create_one's: the whole x, and the template's params as acquire_many
-- has them (X_OF's params: kind whole frac den max_permits burst
-- max_backlog version), one word each.
-- It packs it in two (lean_full below): up to started, which is
-- the same for every instance of a template's version (kept with its
-- params), and from epoch on.
local X_FULL_HEAD, X_FULL_TAIL = '<BBi7i7I4I4i7di7B', '<i7i7i7I4i7i7i7i7i7i7i7i7i4i4i4i4'
local X_PARAMS = 'kind whole frac den max_permits burst max_backlog version'
local P_WORDS = '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$'

-- slice_cost is cost (lib.lua) in numbers: n permits' whole ns and the new
-- sub-ns carry.
local function slice_cost(n, whole, frac, den, rem)
  if frac == 0 then return n * whole, rem end
  local b = fmod(n, den)
  local t = rem + b * frac
  local r = fmod(t, den)
  return n * whole + (n - b) / den * frac + (t - r) / den, r
end

-- born_after_x is born_after's test of origin for acquire_one, which has
-- read x up to last: origin after the floor's fus, and no clock step back
-- behind it.
local function born_after_x(x, fus, epoch, last)
  local origin = dec('<i7', x, X_ORIGIN_AT)
  return origin > fus and (origin - epoch) * 1000 <= last
end

-- acquire_one is acquire_many's path for its most frequent call, one acquire
-- on a named schedule limiter or a template instance that has started, in numbers held in locals
-- rather than a table L: the same steps as acquire (now_rel without a
-- rebase or a clock step, forfeit, cost, pace) and save. It reads x only up
-- to last and rewrites only what changes (X_LEAN, X_RUN: SETRANGE), so a
-- change that would carry into a high part goes the general way, and so does
-- a floor (fl, fj: see floor_read and apply_floor) that moves the schedule.
-- For a template instance, tver is the template's version and idle_ttl its
-- idle TTL (acquire_group's): an instance of an older version goes the
-- general way (to be moved to the new one), and what changes is saved with
-- its TTL (save, settle_ms). It returns the answer, or nil for the general
-- path.
local function acquire_one(key, x, n, max_wait, us, fl, fj, tver, idle_ttl)
  -- x is binary and X_SIZE bytes long (FAST, fast_named), the size of
  -- a schedule limiter's x in the current format
  local code, format, version, whole, frac, den, max_permits, burst, max_backlog, started, epoch,
    next, pace, rem, allocated, idle, permits, lateness, last, expires = dec(tver and X_LEAN_I or X_LEAN, x)
  if code ~= CODE or format ~= FORMAT or (tver and version < tver) then return nil end
  local now = (us - epoch) * 1000
  n, max_wait = SMALL[n] or tonumber(n), SMALL[max_wait] or tonumber(max_wait)
  if started ~= 1 or now >= REBASE or now < last or n < 1 or n > max_permits or n % 1 ~= 0 then return nil end
  if fl then -- apply_floor's test, without its change
    local fus, ah -- floor_read's, without its call, and its check of the form once per call's floors
    if fl == floors_bin or byte(fl, 1) == 66 then
      floors_bin, fus, ah = fl, dec('<i8i8', fl, 16 * fj - 14)
      ah = ah - FAR
    else
      fus, ah = floor_read(fl, fj)
    end -- ah >= -FAR
    if fus ~= 0 and us - fus < FLOOR_AGE then
      if ah > 2 * HORIZON then ah = 2 * HORIZON end
      local at
      if us < fus then at = now + ah else at = (fus - epoch) * 1000 + ah end
      -- (or born_after's, origin read only when it could move the schedule)
      if at > now - FAR and (at > next or
          now + ah > next and (us - fus) * 1000 < 2 * ah and born_after_x(x, fus, epoch, last)) then
        return nil
      end
    end
  end
  if max_wait < 0 or max_wait > HORIZON then max_wait = HORIZON end
  local late = now - next
  if late > max_backlog then -- forfeit
    idle = idle + (late - max_backlog)
    next = now - max_backlog
  end
  local sched = next
  local start = sched -- start_at: max(sched, pace, now), burst inf's up to AT_ONCE early
  if burst == 0 then
    if max_backlog < AT_ONCE then start = sched - max_backlog else start = sched - AT_ONCE end
  end
  if pace > start then start = pace end
  if now > start then start = now end
  local delay = start - now
  local answer
  if delay > max_wait then
    local wait = now - sched
    if wait < 0 then wait = 0 end
    answer = enc(HR, A_OK, us, version, tver and 1 or 0, next - now, R_DENIED, 0, delay, wait, delay - max_wait)
    if late <= max_backlog then -- a denial that forfeited nothing changes nothing
      -- but an instance with an idle TTL gets it anew (save)
      -- (only idle_ttl from now is new: its debt, unchanged, is covered)
      local now_ms = (us - us % 1000) / 1000
      if tver and idle_ttl > 0 and now_ms + idle_ttl > expires then
        local ttl, more = instance_ttl(ttl_ms(max(0, next - now, pace - now), idle_ttl, max_backlog))
        rcall('PEXPIRE', key, ttl)
        rcall('SETRANGE', key, X_EXPIRES_AT, enc('<i7', now_ms + more - 1))
      end
      return answer
    end
  else
    local c
    c, rem = slice_cost(n, whole, frac, den, rem)
    next = sched + c
    if burst == 0 then pace = start else pace = start + math.ceil(c / burst) end
    local late = start - sched -- a start at once, ahead of its slot, is on time
    if late < 0 then late = 0 end
    allocated, permits, lateness = allocated + c, permits + n, lateness + late
    last = now
    local wait = now - next
    if wait < 0 then wait = 0 end
    answer = enc(HR, A_OK, us, version, tver and 1 or 0, next - now, R_GRANTED, sched - now, delay, wait, 0)
  end
  if allocated >= LOW or idle >= LOW or permits >= LOW or lateness >= LOW then return nil end -- a carry
  rcall('SETRANGE', key, X_RUN_AT, enc(X_RUN, next, pace, rem, allocated, idle, permits, lateness, last))
  if tver then -- schedule's settle: until the backlog is forfeited
    local debt = next - now -- max(0, next - now, pace - now)
    if pace - now > debt then debt = pace - now end
    if debt < 0 then debt = 0 end
    local now_ms, ttl = (us - us % 1000) / 1000, ttl_ms(debt, idle_ttl, max_backlog)
    if now_ms + ttl > expires then
      local more
      ttl, more = instance_ttl(ttl)
      rcall('PEXPIRE', key, ttl)
      rcall('SETRANGE', key, X_EXPIRES_AT, enc('<i7', now_ms + more - 1))
    end
  end
  return answer
end

-- create_one is acquire_many's path for one acquire on a template
-- instance that does not exist yet (and no named limiter of its name): the
-- instance made from the template's params (X_PARAMS, as text) and started
-- at us, as resolve, now_rel and start make it, and the acquire decided on
-- it, which a fresh schedule grants at once (nothing is scheduled before
-- it: delay 0), saved with its TTL. It returns the answer, or nil for the
-- general path (n out of range, or a floor ahead of the fresh schedule, see
-- apply_floor).
local function create_one(key, params, n, us, fl, fj, tver, idle_ttl)
  local p = made and made[params] -- (see "Readings kept between calls" in lib.lua)
  if not p then
    local _, whole, frac, den, max_permits, burst, max_backlog = string.match(params, P_WORDS)
    if not max_backlog then return nil end
    -- (binary only: Redis's Lua, whose arithmetic reads a decimal string
    -- with one strtod, where tonumber takes two; see time_us)
    p = {whole + 0, SMALL[frac] or frac + 0, SMALL[den] or den + 0, max_permits + 0, SMALL[burst] or burst + 0,
      max_backlog + 0}
    p[7] = enc(X_FULL_HEAD, CODE, FORMAT, tver, p[1], p[2], p[3], p[4], p[5], p[6], 1) -- x up to started
    if made then
      if made[0] >= 256 then made = {[0] = 0} end
      made[params], made[0] = p, made[0] + 1
    end
  end
  local whole, frac, den, max_permits, burst, max_backlog = p[1], p[2], p[3], p[4], p[5], p[6]
  n = SMALL[n] or tonumber(n)
  if n < 1 or n > max_permits or n % 1 ~= 0 then return nil end
  if fl then -- apply_floor's test at now 0, epoch us
    local fus, ah = floor_read(fl, fj)
    if fus ~= 0 and us - fus < FLOOR_AGE then
      if ah > 2 * HORIZON then ah = 2 * HORIZON end
      local at = ah
      if us >= fus then at = (fus - us) * 1000 + ah end
      -- (a fresh instance is born after a floor seen before us: born_after)
      if at > -FAR and (at > 0 or ah > 0 and us > fus and (us - fus) * 1000 < 2 * ah) then return nil end
    end
  end
  -- A permit's cost, pace and TTL are the same for every instance of the
  -- template (one permit: kept in p, for its idle_ttl).
  local c, rem, pace, ttl, more
  if n == 1 and p.ttl_for == idle_ttl then
    c, rem, pace, ttl, more = p.c, p.rem, p.pace, p.ttl, p.more
  else
    c, rem = slice_cost(n, whole, frac, den, 0)
    pace = 0 -- burst 0: "inf"
    if burst ~= 0 then pace = math.ceil(c / burst) end
    local debt = c
    if pace > c then debt = pace end
    ttl, more = instance_ttl(ttl_ms(debt, idle_ttl, max_backlog))
    if n == 1 then p.c, p.rem, p.pace, p.ttl, p.more, p.ttl_for = c, rem, pace, ttl, more, idle_ttl end
  end
  -- code format version | params | started epoch | next pace rem allocated
  -- idle permits lateness last | expires (see instance_ttl) | origin stored
  -- | the totals' high parts
  local expires = (us - us % 1000) / 1000 + more - 1
  rcall('SET', key, p[7] .. enc(X_FULL_TAIL, us, c, pace, rem, c, 0, n, 0, 0, expires, us, 0, 0, 0, 0, 0), 'PX', ttl)
  return enc(HR, A_OK, us, tver, 1, c, R_GRANTED, 0, 0, 0, 0)
end

KINDS.schedule = {
  code = 1,
  params = 'burst:d max_backlog:i7', -- burst 0: "inf"
  fast = acquire_one,
  lean_names = 'code format version whole frac den max_permits burst max_backlog started epoch next pace rem allocated idle permits lateness last',
  lean_code = CODE, lean_fmt = X_LEAN, lean_run = X_RUN, lean_run_at = X_RUN_AT, lean_size = X_SIZE,
  lean_expires_at = X_EXPIRES_AT, lean_fmt_i = X_LEAN_I, lean_origin_at = X_ORIGIN_AT,
  create = create_one, lean_full = {X_FULL_HEAD, X_FULL_TAIL}, lean_params = X_PARAMS,
  engine = function()
    -- start_at is where a call at now starts (limiter/schedule.go startAt):
    -- after the schedule and the pace, and for burst inf (stored as 0) up to
    -- AT_ONCE (at most max_backlog) before its slot.
    local function start_at(L, now)
      if L.burst == 0 then return max(L.next - min(L.max_backlog, AT_ONCE), L.pace, now) end
      return max(L.next, L.pace, now)
    end
    return {
    acquire = function(L, now, n, max_wait)
      forfeit(L, now, L.max_backlog)
      local sched = L.next
      local st = start_at(L, now)
      local delay = st - now
      if delay > max_wait then
        return 0, 0, 0, 0, delay, 0, max(0, now - sched), delay - max_wait
      end
      local c, r = cost(L, n, L.rem)
      L.rem = r
      L.next = sched + c
      if L.burst == 0 then L.pace = st else L.pace = st + math.ceil(c / L.burst) end -- burst "inf" is stored as 0
      local late = st - sched -- a start at once, ahead of its slot, is on time
      if late < 0 then late = 0 end
      L.d_allocated, L.d_permits, L.d_lateness = L.d_allocated + c, L.d_permits + n, L.d_lateness + late
      L.last = now
      return 1, n, sched, st, delay, late, max(0, now - L.next), 0
    end,
    peek = function(L, now)
      forfeit(L, now, L.max_backlog)
      return max(0, now - L.next), start_at(L, now) - now
    end,
    reset = function(L, now)
      forfeit(L, now, 0)
      L.pace = max(L.pace, now)
    end,
    retune = function(L, now) forfeit(L, now, L.max_backlog) end,
    floor = function(L, at) L.pace = max(L.pace, at) end,
    settle = function(L) return L.max_backlog end, -- until the backlog is forfeited
    rewinds = true,
  } end,
}
