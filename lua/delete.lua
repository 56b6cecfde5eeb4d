-- delete: remove a limiter (its one key) and publish the change.
-- KEYS: limiter hash. ARGV: channel, name. Reply: 1 deleted, 0 not found.
local n = redis.call('DEL', KEYS[1])
if n == 1 then redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' 0') end
return n
