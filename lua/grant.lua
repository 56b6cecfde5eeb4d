-- grant: k permits for a client pool, which dispenses them locally. The same
-- decision as acquire, plus what the pool needs to place each permit on the
-- schedule and to hand unused ones back (see release.lua).
-- KEYS: limiter hash, template-instance key. ARGV, reply: see grant_main in
-- lib.lua.
return grant_main(KEYS, ARGV)
