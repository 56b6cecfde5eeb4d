-- acquire: n permits for one caller (limiter.Params.Acquire).
-- KEYS: limiter hash, template-instance hash. ARGV: see acquire_main in lib.lua.
return acquire_main(KEYS, ARGV, false)
