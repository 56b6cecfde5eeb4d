-- reset: start a new schedule now (limiter.Params.Reset): the backlog or the
-- stored permits are forfeited as idle, totals are kept.
-- KEYS: limiter hash, template-instance key. ARGV: [template params...] from 1.
-- Reply: {code, version, now_us, position} (a started limiter's position: next
-- relative to now, see Floors in lib.lua; {code, version} for one not
-- started); {-1}: not found; {-5, kind}: a limiter of another kind.
local us = time_us()
local L = resolve_keys(KEYS, ARGV, 1, us)
if not L then return {NOT_FOUND} end
if L.other then return {OTHER_KIND, L.kind} end
if L.started == 1 then
  local now = now_rel(L, us)
  reset(L, now)
  save(L) -- an instance keeps its TTL
  return {OK, L.version, us, L.next - now}
end
return {OK, L.version}
