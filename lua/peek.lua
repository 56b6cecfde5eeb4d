-- peek: the limiter's live state now, without changing it (limiter.Params.Peek).
-- KEYS: limiter hash, template-instance key. ARGV: [template params...] from 1.
-- Reply: {code, wait, delay, version, now_us, started, instance, allocated,
-- allocated_hi, idle, idle_hi, permits, permits_hi, lateness, lateness_hi,
-- position}: each total is the int64 hi * 2^32 + lo, exact; idle includes
-- the backlog that would be forfeited now; position (a started limiter's) is
-- next relative to now as stored, before forfeit or resync (see Floors in
-- lib.lua; limiter.View.Next), and for a kind that counts (window) its limit
-- (wait is then the permits left). {-6, now_us}: a calendar window needs
-- its bounds first (bounds.lua). code -1: not found; {-5,
-- kind}: a limiter of another kind.
local us = time_us()
local L = resolve_keys(KEYS, ARGV, 1, us)
if not L then return {NOT_FOUND} end
if L.other then return {OTHER_KIND, L.kind} end
local flag = L.inst and 1 or 0
if L.started ~= 1 then
  local out = {OK, 0, 0, L.version, us, 0, flag, totals(L)}
  if engine_of(L.kind).counts then out[16], out[17] = 0, L.limit end
  return out
end
local now = now_rel(L, us)
local E = engine_of(L.kind)
if E.bounds and E.bounds(L, now) then return {NEED_BOUNDS, us} end
local pos = math.max(L.next - now, -FAR) -- limiter.View.Next
local wait, delay = engine_of(L.kind).peek(L, now) -- L is not saved
local out = {OK, wait, delay, L.version, us, 1, flag, totals(L)}
out[16] = pos
if engine_of(L.kind).counts then out[17] = L.limit end -- wait is the permits left
return out
