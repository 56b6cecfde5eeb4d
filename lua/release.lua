-- release: a client pool hands back the unused tail of a grant
-- (limiter.Params.Release). If the schedule has not moved since the grant
-- (same version, next and carry), it is rewound; otherwise the unused time is
-- moved from allocated to idle and is lost to everyone.
-- KEYS: limiter hash, template-instance hash.
-- ARGV: version, grant_ep, sched, next_after, pace_used (relative to grant_ep),
-- unused_ns, unused_permits, rem_used, rem_after, [template PARAMS...].
-- Reply: {code, rewound}.
local us = time_us()
local L = resolve(ARGV, 10, us)
if not L then return {-1} end
if L.st ~= 1 then return {1, 0} end
local now = now_rel(L, us)
local a = {}
for i = 1, 9 do a[i] = tonumber(ARGV[i]) end
local shift = (a[2] - L.ep) * 1000 -- grant epoch → current epoch
local sched, after = a[3] + shift, a[4] + shift
local unused, m = math.max(0, math.min(a[6], after - sched)), a[7]
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
save(L)
return {1, rewound}
