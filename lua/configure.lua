-- configure: create, replace or reconfigure a limiter in one step, so that a
-- limiter is never half-written. A config equal to the current one changes
-- nothing; one of the same kind is applied in place keeping the schedule
-- (limiter.Reconfigure) and bumps the version; another kind replaces the
-- limiter with a fresh one (PATCH refuses that). Every change is published.
-- KEYS: limiter hash, state key (x, see lib.lua), then any other keys of the
-- limiter (a share limiter's clients, a concurrency limiter's slots), deleted
-- with it on a kind change.
-- ARGV: mode ('put'|'patch'), expected version (patch; '' for any),
-- config JSON (canonical), restart (1: reset after applying), channel, name,
-- the kind's params (see Layouts in lib.lua; without meaning for version, which this
-- script assigns).
-- Reply: {code, version, changed, replaced}; code 201 created, 200 ok, -1
-- not found, -3 version moved (retry), -4 kind change refused; replaced is 1
-- when a limiter of another kind was replaced.
local mode, expected, cfg, restart, channel, name = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local NP = {}
params_from(NP, ARGV, 7)
local us = time_us()
local L = load(KEYS[2], false)
if L and L.other then L.version = tonumber(redis.call('HGET', KEYS[1], 'ver')) or 0 end
if L and mode == 'patch' and expected ~= '' and tonumber(expected) ~= L.version then return {VERSION_MOVED, L.version, 0} end
if not L and mode == 'patch' then return {NOT_FOUND, 0, 0} end
local code, ver, replaced = UPDATED, 1, 0
if L and L.kind == NP.kind then
  if redis.call('HGET', KEYS[1], 'cfg') == cfg and restart ~= '1' then return {UPDATED, L.version, 0} end
  ver = L.version + 1 -- before retune, which copies NP's (meaningless) ver into L
  local now = now_rel(L, us)
  retune(L, now, NP)
  if restart == '1' then reset(L, now) end
else
  if L and mode == 'patch' then return {KIND_CHANGE, L.version, 0} end
  if L then
    ver, replaced = L.version + 1, 1
    redis.call('DEL', unpack(KEYS))
  else
    code = CREATED
    redis.call('DEL', unpack(KEYS)) -- leftovers of an earlier life, if any
  end
  L = fresh(KEYS[2])
  take_params(L, NP)
  if engine_of(L.kind).starts_at_creation then start(L, now_rel(L, us), us) end
end
L.version = ver
L.x = pack(L)
redis.call('HSET', KEYS[1], 'kind', L.kind, 'ver', ver, 'cfg', cfg)
redis.call('SET', KEYS[2], L.x)
redis.call('PUBLISH', channel, name .. ' ' .. ver)
return {code, ver, 1, replaced}
