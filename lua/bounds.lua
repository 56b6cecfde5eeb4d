-- bounds: the boundaries of a calendar window (window.lua), which only Go
-- can compute, for a limiter whose call answered that it needs them
-- (limiter.Params.Bound): the limiter starts, takes the call's floor, and
-- moves into the window [start, end) that contains TIME, followed by the one
-- ending at after.
-- KEYS: limiter hash, template-instance key.
-- ARGV: start_us, end_us, after_us (Unix us), idle_ttl_ms, floor (see Floors;
-- '0': none), [template params...].
-- Reply: {1}; {-6, now_us} when TIME is not in [start, end) (the store asks
-- again around now_us); {-1}: not found; {-5, kind}: a limiter of another
-- kind.
local us = time_us()
local L = resolve_keys(KEYS, ARGV, 6, us)
if not L then return {NOT_FOUND} end
if L.other then return {OTHER_KIND, L.kind} end
local s, e, f = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if us < s or us >= e then return {NEED_BOUNDS, us} end
local E = engine_of(L.kind)
if not E.set_bounds then return {OK} end -- reconfigured since: nothing to do
local now = floored(L, us, ARGV[5], 1)
start(L, now, us)
E.set_bounds(L, now, (e - L.epoch) * 1000, (f - L.epoch) * 1000)
save(L, now, tonumber(ARGV[4]))
return {OK}
