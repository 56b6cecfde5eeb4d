-- delete: remove a limiter (all its keys) and publish the change.
-- KEYS: limiter hash, then every other key of the limiter (its state key, a
-- share limiter's clients, a concurrency limiter's slots).
-- ARGV: channel, name. Reply: 1 deleted, 0 not found.
local n = redis.call('DEL', KEYS[1])
if #KEYS > 1 then redis.call('DEL', unpack(KEYS, 2)) end
if n == 1 then redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' 0') end
return n
