-- peek: the limiter's live state now, without changing it (limiter.Params.Peek).
-- KEYS: limiter hash, template-instance key. ARGV: [template PARAMS...] from 1.
-- Reply: {code, wait, delay, version, now_us, started, instance, allocated,
-- allocated_hi, idle, idle_hi, permits, permits_hi, lateness, lateness_hi}:
-- each total is the int64 hi * 2^32 + lo, exact; idle includes the backlog
-- that would be forfeited now. code -1: not found; {-5, kind}: a limiter of
-- another kind.
local us = time_us()
local L = resolve_keys(KEYS, ARGV, 1, us)
if not L then return {-1} end
if L.other then return {-5, L.kind} end
local flag = L.inst and 1 or 0
if L.st ~= 1 then return {1, 0, 0, L.ver, us, 0, flag, totals(L)} end
local now = now_rel(L, us)
local wait, delay
if L.kind == 'smooth' then
  resync(L, now)
  wait, delay = stored_time(L), math.max(0, L.nx - now)
else
  forfeit(L, now, L.maxb)
  wait, delay = math.max(0, now - L.nx), math.max(L.nx, L.pc, now) - now
end
return {1, wait, delay, L.ver, us, 1, flag, totals(L)}
