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
