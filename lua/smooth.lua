-- smooth: the smooth engine (limiter/smooth.go) in Redis: Guava's
-- SmoothBursty and SmoothWarmingUp in nanoseconds. Time that passes while
-- nobody asks is stored (up to cap ns of cool-down time); a request spends
-- stored permits first and pushes next (Guava's next_free) only for what it
-- could not take from the store. It follows lib.lua (see Kinds there) and
-- registers its row in KINDS.

-- resync stores the time passed since next (Guava's resync); what does not
-- fit under cap is idle.
local function resync(L, now)
  local nx = L.next
  if now <= nx then return end
  local gap = now - nx
  local into = min(gap, L.cap - L.stored)
  L.stored = L.stored + into
  L.d_idle = L.d_idle + (gap - into)
  L.next = now
end

-- stored_time is the stored permits' time at the stable rate: what callers
-- may still burst through.
local function stored_time(L)
  if L.warm == 0 then return L.stored end
  return floor(L.stored / L.cooldown * L.stable)
end

KINDS.smooth = {
  code = 2,
  params = 'cap:i7 initial:i7 warm:B cooldown:d threshold:d slope:d',
  engine = function() return {
    acquire = function(L, now, n, max_wait)
      if L.next - now > max_wait then
        local delay = L.next - now
        return 0, 0, 0, 0, delay, 0, stored_time(L), delay - max_wait
      end
      resync(L, now)
      local st, push = L.next, 0
      if L.warm == 0 then
        local c, r = cost(L, n, L.rem)
        local from = min(c, L.stored)
        L.rem, L.stored, push = r, L.stored - from, c - from
      elseif L.stored == 0 then
        push, L.rem = cost(L, n, L.rem)
      else
        -- Guava's SmoothWarmingUp.storedPermitsToWaitTime, then the rest at
        -- the stable rate.
        local stable, stored = L.stable, L.stored / L.cooldown
        local spend = min(n, stored)
        local take, wait = spend, 0
        local above = stored - L.threshold
        if above > 0 then
          local take_above = min(above, take)
          local length = (stable + above * L.slope) + (stable + (above - take_above) * L.slope)
          wait = floor(take_above * length / 2.0)
          take = take - take_above
        end
        push = wait + floor(stable * take) + floor((n - spend) * stable)
        if spend == stored then L.stored = 0 else L.stored = L.stored - min(L.stored, floor(spend * L.cooldown)) end
      end
      L.next = L.next + push
      L.d_allocated, L.d_permits = L.d_allocated + push, L.d_permits + n
      L.last = now
      return 1, n, st, st, st - now, 0, stored_time(L), 0
    end,
    peek = function(L, now)
      resync(L, now)
      return stored_time(L), max(0, L.next - now)
    end,
    reset = function(L, now)
      resync(L, now)
      L.d_idle = L.d_idle + L.stored
      L.stored = L.initial
    end,
    -- the stored permits are rescaled by new cap / old cap, as Guava's setRate
    retune = function(L, now, NP)
      resync(L, now)
      if L.cap == 0 and NP.warm == 1 then L.stored = NP.cap
      elseif L.cap == 0 then L.stored = 0
      else L.stored = min(NP.cap, floor(L.stored * NP.cap / L.cap)) end
    end,
    floor = function(L) L.stored = 0 end,
    settle = function(L) return L.cap - L.stored end, -- until the stored time is full
    starts_at_creation = true, -- Guava: time before the first request stores permits
  } end,
}
