-- reset: start a new schedule now (limiter.Params.Reset): the backlog or the
-- stored permits are forfeited as idle, totals are kept.
-- KEYS: limiter hash, template-instance key. ARGV: [template PARAMS...] from 1.
-- Reply: {code, version}; {-1}: not found; {-5, kind}: a limiter of another
-- kind.
local us = time_us()
local L = resolve_keys(KEYS, ARGV, 1, us)
if not L then return {-1} end
if L.other then return {-5, L.kind} end
if L.st == 1 then
  reset(L, now_rel(L, us))
  save(L) -- an instance keeps its TTL
end
return {1, L.ver}
