-- peek: the limiter's live state now, without changing it (limiter.Params.Peek).
-- KEYS: limiter hash, template-instance hash. ARGV: [template PARAMS...] from 1.
-- Reply: {code, wait, delay, extra_idle, version, now_us, allocated, idle,
-- permits, lateness, started}; totals are strings read as stored (exact int64),
-- extra_idle is backlog that would be forfeited now (a decimal string when
-- past 2^53, after months without a call).
local us = time_us()
local L = resolve(ARGV, 1, us)
if not L then return {-1} end
local tot = redis.call('HMGET', L.key, 'al', 'id', 'pm', 'lt')
for i = 1, 4 do tot[i] = tot[i] or '0' end
if L.st ~= 1 then return {1, 0, 0, 0, L.ver, us, tot[1], tot[2], tot[3], tot[4], 0} end
local now = now_rel(L, us)
local wait, delay
if L.kind == 'smooth' then
  resync(L, now)
  wait, delay = stored_time(L), math.max(0, L.nx - now)
else
  forfeit(L, now, L.maxb)
  wait, delay = math.max(0, now - L.nx), math.max(L.nx, L.pc, now) - now
end
return {1, wait, delay, idle_delta(L), L.ver, us, tot[1], tot[2], tot[3], tot[4], 1}
