-- release: a client pool hands back the unused tail of a grant
-- (limiter.Params.Release). If the schedule has not moved since the grant
-- (same version, next and carry), it is rewound; otherwise the unused time is
-- moved from allocated to idle and is lost to everyone. A kind that counts
-- (window) gives the permits back to its count while its window is the
-- grant's (next is the end the grant saw), never below 0 (rewound 1), and
-- keeps its count once the window has moved on.
-- A grant is handed back once: the first hand-back of a grant records it
-- (KEYS[3], named after the grant, in the limiter's hash tag) for an hour
-- past the grant's end, and a hand-back of a grant so recorded changes
-- nothing.
-- KEYS: limiter hash, template-instance key, the grant's hand-back record.
-- ARGV: version, grant_ep, sched, next_after, pace_used (relative to grant_ep),
-- unused_ns, unused_permits, rem_used, rem_after, [template params...].
-- Reply: {code, rewound, now_us, position, again}: position is next relative
-- to now after the hand-back (see Floors in lib.lua), again 1 for a grant
-- handed back before (nothing changed); {1, 0} for a limiter not started;
-- {-1}: not found; {-5, kind}: a limiter of another kind.
local us = time_us()
local L = resolve_keys(KEYS, ARGV, 10, us)
if not L then return {NOT_FOUND} end
if L.other then return {OTHER_KIND, L.kind} end
if L.started ~= 1 then return {OK, 0} end
local a = {}
for i = 1, 9 do a[i] = tonumber(ARGV[i]) end
local keep = 3600000 + math.max(0, math.ceil(((a[2] - us) * 1000 + a[4]) / 1e6)) -- ms
if not redis.call('SET', KEYS[3], '1', 'NX', 'PX', keep) then
  local now = now_rel(L, us) -- not saved: the position as it stands
  return {OK, 0, us, L.next - now, 1}
end
-- Decided in the limiter's stored epoch, before now_rel rebases it: after
-- months without a call the rebase settles a far-behind next (see now_rel), and
-- next would no longer be the grant's end even though nothing happened since.
-- The grant's times are relative to its own epoch (a[2]); its length is exact
-- there, while shifted to the limiter's epoch a grant months old may not be.
-- after, once shifted, is exact whenever it can equal next (the sum is then
-- below 2^53 and so is computed exactly).
local shift = (a[2] - L.epoch) * 1000 -- grant epoch → limiter epoch
local after = a[4] + shift
local unused, m = math.max(0, math.min(a[6], a[4] - a[3])), a[7]
local rewound = 0
if engine_of(L.kind).counts then
  if L.next == after then
    L.stored = L.stored - math.min(m, L.stored)
    rewound = 1
  end
  unused = 0 -- a window allocates no time
elseif engine_of(L.kind).rewinds and L.version == a[1] and L.next == after and L.rem == a[9] then
  L.next = after - unused
  L.rem = a[8]
  L.pace = a[5] + shift
  rewound = 1
else
  L.d_idle = L.d_idle + unused
end
L.d_allocated, L.d_permits = L.d_allocated - unused, L.d_permits - m
local now = now_rel(L, us)
save(L) -- an instance keeps its TTL
return {OK, rewound, us, L.next - now, 0}
