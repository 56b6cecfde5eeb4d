-- release: a client pool hands back the unused tail of a grant
-- (limiter.Params.Release). If the schedule has not moved since the grant
-- (same version, next and carry), it is rewound; otherwise the unused time is
-- moved from allocated to idle and is lost to everyone.
-- KEYS: limiter hash, template-instance key.
-- ARGV: version, grant_ep, sched, next_after, pace_used (relative to grant_ep),
-- unused_ns, unused_permits, rem_used, rem_after, [template PARAMS...].
-- Reply: {code, rewound}; {-1}: not found; {-5, kind}: a limiter of another
-- kind.
local us = time_us()
local L = resolve_keys(KEYS, ARGV, 10, us)
if not L then return {-1} end
if L.other then return {-5, L.kind} end
if L.st ~= 1 then return {1, 0} end
local a = {}
for i = 1, 9 do a[i] = tonumber(ARGV[i]) end
-- Decided in the limiter's stored epoch, before now_rel rebases it: after
-- months without a call the rebase settles a far-behind nx (see now_rel), and
-- nx would no longer be the grant's end even though nothing happened since.
-- The grant's times are relative to its own epoch (a[2]); its length is exact
-- there, while shifted to the limiter's epoch a grant months old may not be.
-- after, once shifted, is exact whenever it can equal nx (the sum is then
-- below 2^53 and so is computed exactly).
local shift = (a[2] - L.ep) * 1000 -- grant epoch → limiter epoch
local after = a[4] + shift
local unused, m = math.max(0, math.min(a[6], a[4] - a[3])), a[7]
local rewound = 0
if L.kind == 'schedule' and L.ver == a[1] and L.nx == after and L.rem == a[9] then
  L.nx = after - unused
  L.rem = a[8]
  L.pc = a[5] + shift
  rewound = 1
else
  L.d_id = L.d_id + unused
end
L.d_al, L.d_pm = L.d_al - unused, L.d_pm - m
now_rel(L, us)
save(L) -- an instance keeps its TTL
return {1, rewound}
