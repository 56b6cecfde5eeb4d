-- restore: undoes what acquire_all.lua wrote (its mode '2') when another
-- group of the same call refused, on a cluster where the call's limiters
-- live in different slots. A key is restored only if it still holds what
-- acquire_all wrote: then nobody used the limiter since, and it gets back
-- the x it held (deleted if it had none) and what was left of its TTL (the
-- TTL it had, less the time since, at least 1 ms). A key written since by
-- anyone else is left as it is: its later callers were decided against the
-- permits this call took, which cannot be taken back from under them.
-- KEYS: the keys. ARGV: the Redis time of the write (us), then per key the
-- x before ('' for none), its PTTL then (ms; -1 for none), the x written.
-- Reply: per key 1 (restored) or 0 (written since, left).
if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5: effects, for TIME
local t = redis.call('TIME')
local elapsed = math.floor((t[1] * 1000000 + t[2] - tonumber(ARGV[1])) / 1000)
local out = {}
for i, key in ipairs(KEYS) do
  local before, pttl, written = ARGV[3 * i - 1], tonumber(ARGV[3 * i]), ARGV[3 * i + 1]
  if redis.call('GET', key) == written then
    if before == '' then
      redis.call('DEL', key)
    elseif pttl > 0 then
      redis.call('SET', key, before, 'PX', math.max(1, pttl - math.max(0, elapsed)))
    else
      redis.call('SET', key, before)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
