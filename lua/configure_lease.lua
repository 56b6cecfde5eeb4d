-- configure_lease: create, replace or reconfigure a share or concurrency
-- limiter in one step, like configure.lua does for the rate kinds (same modes
-- and replies). A standalone script: lib.lua is not prepended.
--
-- A config equal to the current one changes nothing; one of the same kind
-- takes the new parameters keeping the clients' leases (a lowered capacity may
-- be exceeded until they are refreshed); another kind replaces the limiter and
-- all its keys with a fresh one (PATCH refuses that). Every change bumps the
-- version and is published.
-- KEYS: limiter hash, state key, client hash (share), slots set
-- (concurrency); every key of the limiter, so that a kind change leaves
-- nothing behind.
-- ARGV: mode ('put'|'patch'), expected version (patch; '' for any), config
-- JSON (canonical), channel, name, kind, then field/value pairs of parameters.
-- Reply: {code, version, changed}; code 201 created, 200 ok, -1 not found,
-- -3 version moved (retry), -4 kind change refused.
-- Reply codes (store/replies.go has the same numbers under the same names).
local NOT_FOUND, VERSION_MOVED, KIND_CHANGE, UPDATED, CREATED = -1, -3, -4, 200, 201
local mode, expected, cfg, channel, name, kind = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local cur = redis.call('HMGET', KEYS[1], 'kind', 'ver', 'cfg')
local exists = cur[1] and true or false
local ver = tonumber(cur[2]) or 0
if exists and mode == 'patch' and expected ~= '' and tonumber(expected) ~= ver then return {VERSION_MOVED, ver, 0} end
if not exists and mode == 'patch' then return {NOT_FOUND, 0, 0} end
local code = UPDATED
if exists and cur[1] == kind then
  if cur[3] == cfg then return {UPDATED, ver, 0} end
  ver = ver + 1
elseif exists then
  if mode == 'patch' then return {KIND_CHANGE, ver, 0} end
  ver = ver + 1
  redis.call('DEL', unpack(KEYS))
else
  code, ver = CREATED, 1
  redis.call('DEL', unpack(KEYS)) -- leftovers of an earlier life, if any
end
local kv = {'kind', kind, 'ver', string.format('%.0f', ver), 'cfg', cfg}
for i = 7, #ARGV do kv[#kv + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(kv))
-- The state key is what the rate scripts read (lib.lua, Storage): here, the
-- kind.
redis.call('SET', KEYS[2], kind)
redis.call('PUBLISH', channel, name .. ' ' .. ver)
return {code, ver, 1}
