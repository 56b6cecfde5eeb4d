-- acquire: permits for callers, any number of acquires on any number of
-- limiters in one call (limiter.Params.Acquire, one after the other).
-- KEYS, ARGV, reply: see acquire_many in lib.lua.
return acquire_many(KEYS, ARGV)
