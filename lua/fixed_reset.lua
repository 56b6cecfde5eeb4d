-- fixed_reset: deletes a fixed window counter's counts (store.Fixed) of
-- the window that holds Redis' TIME and of the windows either side: those
-- a store whose estimate of Redis' clock is off by up to its bound may
-- count in now. Older windows are never counted again, and expire. A
-- standalone script.
--
-- KEYS: the counter's base (prefix:{name}:n:); its keys share the base's
-- hash tag, so one slot. ARGV: its period (ms). Reply: the number of keys
-- deleted.
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local p = tonumber(ARGV[1])
local start = ms - ms % p
return redis.call('DEL', KEYS[1] .. string.format('%d', start - p),
  KEYS[1] .. string.format('%d', start), KEYS[1] .. string.format('%d', start + p))
