-- limitd: the library every script starts with (store/ prepends it).
--
-- It mirrors limiter/ (engine.go, schedule.go, smooth.go, slice.go) operation for
-- operation, so that a limiter in Redis and the Go model give the same results
-- to the nanosecond. Lua numbers are doubles: every time here is relative to a
-- per-limiter epoch (epoch, Unix microseconds, exact until year 2255), rebased
-- as time goes on, and every value the engine keeps stays within 2^51 of the
-- current time, so the arithmetic is exact integer arithmetic. Totals that grow
-- without bound (allocated, idle, permits, lateness) are kept as exact 64-bit
-- integers in two parts (see "Storage").
--
-- Storage. Everything the scripts need of a rate limiter is one packed value,
-- x: kind code, version, engine parameters, state and totals. It is a string
-- key: a named limiter's state key (beside its hash of kind, ver and cfg, the
-- canonical config as JSON, which configure.lua writes for store/ to read), or
-- a template instance's key, with a TTL. So a call reads one value (GET, or
-- MGET for many limiters) and writes one (SET, SET ... PX, or SETRANGE for
-- the bytes that changed).
--
--   x = code format version | params | started epoch | next pace rem |
--   allocated idle permits lateness (low parts) last | expires |
--   origin stored | allocated idle permits lateness (high parts),
-- where code is the kind's (its row's code, see Kinds: 1 schedule, 2
-- smooth, 3 window), format the layout's (FORMAT), params are whole frac den
-- max_permits and the kind's own (its row's params: burst max_backlog in
-- schedule.lua, cap initial warm cooldown threshold slope in smooth.lua,
-- limit period sliding calendar zone in window.lua), the
-- totals are each an int64 in two parts, expires is when an instance's key
-- expires at the earliest (Unix ms; 0: unknown, named limiters; see
-- "Instance TTLs"), and last is the time of the latest grant, reset or
-- reconfiguration (limiter.State.Last, relative to epoch).
-- The field groups below (HEAD, SLICE, STATE, RUN, REST) and the kinds'
-- params are the one description of x: every layout, size and offset is
-- derived from them (see Layouts). What one acquire changes (RUN: next pace
-- rem, the low parts and last) is one run of bytes, with only what it reads
-- before it, so that a kind's fast path (schedule's acquire_one) reads a
-- prefix and rewrites only that run (window's window_one reads on to its
-- count, stored, and rewrites from next to there). An x of an earlier
-- format (format 4: expires at the end, 144 or 168 bytes; OLD_FORMATS: 137 or 161 bytes
-- without expires, 136 or 160 also without the format byte, 129 or 153 also
-- without last) is read with expires and last 0 where it had none, and
-- written in the current one; an x of a format this file does not know is an
-- error. expires comes right after the run: a named limiter's fast path
-- reads the prefix without it, an instance's the prefix with it, in the same
-- unpack, and writes it only when it sets a TTL.
--
-- Instance TTLs. An instance's key must live while it owes (its schedule
-- runs ahead of now) and then until it settles or for its template's
-- idle_ttl (ttl_ms). A PEXPIRE per acquire costs about as much as the rest of
-- the fast path's Redis work, so the fast path sets a TTL an eighth longer
-- than needed and records the deadline in expires; while a later acquire's
-- deadline falls within it, it sets none. So an instance lives at most an
-- eighth longer than its TTL after its last use; it never lives shorter. Any
-- other write of an instance sets its TTL exactly and records it, or records
-- 0 (unknown).

-- Clock steps (limiter/floor.go). When TIME is earlier than last, Redis time
-- stepped back (a failover to a host whose clock is behind): now_rel moves the
-- epoch back by the step, so that the limiter's own time stands where it stood
-- and its schedule continues from there, with answers on the new clock. No
-- caller waits out the step and no time is counted twice. A step forward looks
-- like idle time: a schedule's backlog grows (up to max_backlog), a smooth
-- limiter stores permits (up to its burst).
--
-- Floors (limiter.Params.ApplyFloor). Every answer carries the schedule's
-- position (next: the next permit's scheduled start; smooth: next_free) and the
-- time of the answer; callers (store.Store) send the furthest they have seen
-- as a floor, the time it was seen (Unix us) and how far ahead of that time
-- it was (ns), and apply_floor never lets the schedule start before it, so a
-- state that came back older (a failover that lost writes) or fresh (an empty
-- restart) does not grant again what was granted. A floor seen at a time
-- later than TIME (the clock stepped back since) is re-anchored at now: it
-- keeps the schedule as far ahead of now as its caller was told, not the
-- length of the step.
-- A floor is the time seen (us) and the ns ahead plus FAR (so never
-- negative; clamped, as apply_floor does); the time seen 0 means none. The
-- floors of a call's limiters come as one argument, one after the other in
-- KEYS order (or '0' when none has one), in one of two forms
-- (store/floors.go): 'B' then 16 bytes per limiter, the two as
-- little-endian int64s, which one struct.unpack reads (the store sends it
-- once it has seen a binary answer, so only where Lua has struct); or
-- FLOOR_WIDTH hexadecimal digits per limiter, 14 for each, read with strtoul
-- (several times cheaper on these digits than the strtod of decimal).
-- floor_read reads the j-th. One argument per call costs Redis far less
-- than two per limiter: each argument is a Lua string made, hashed and
-- collected.
--
-- A share or concurrency limiter's state key (configure_lease.lua) holds its
-- kind's name as x, so that these scripts answer {-5, kind} for it in the
-- same read.
--
-- Where Redis's Lua has the struct library (every real Redis), x is
-- little-endian binary: doubles ('d') for fractional values, two's-complement
-- integers of 7 bytes ('i7', +-2^55) for times and counts, which all fit
-- (|x| < 2^53), and 4 bytes ('I4', 'i4') for the slice's fraction,
-- denominator and rem, unsigned (a carry, < 2^26, or a sliding window's
-- previous count, < 2^32: 'I4' reads every rem an earlier limitd wrote as
-- 'i4' as it was, all below 2^31). A total is the int64 hi * 2^32 + lo, its
-- low part lo 'i7' (0 <= lo < 2^51) with the others' low parts, its high part
-- hi 'i4' at the end. Where struct
-- is missing (gopher-lua in miniredis) the same numbers are decimal text, one
-- space apart ('%.17g', exact). A server always has struct or never does, so
-- it only ever sees one form; store/'s tests read both (decodeStored). The
-- code comes first in both forms: byte 1 or 2 in binary, the digit '1' or '2'
-- in text, then the format. The text form is never kept across versions of
-- limitd (it lives in miniredis), so it has no earlier formats to read.
-- The slice as a double (stable) is not stored but computed as
-- limiter.Slice.Float does, whole + frac / den, the same two IEEE operations
-- with the same result.

-- Globals. A script runs this file top to bottom on every call. In a Redis
-- Function library (lua.Library: FUNCTION LOAD, Redis >= 7) the top level runs
-- once, where Redis offers no global but a bare redis table, and the library's
-- functions then serve every call: so the top level only defines; init reads
-- the globals, at the end of this file for a script, on a function's first
-- call for a library (`if not rcall then init(true) check_layouts() end`).

local HORIZON = 1125899906842624 -- 2^50 ns, limiter.Horizon
local REBASE = 1099511627776     -- 2^40 ns (~18 min): move the epoch this often
local FAR = 4503599627370496     -- 2^52 ns (~52 days): see now_rel
local B32 = 4294967296           -- 2^32: the split of a total
local LOW = 2251799813685248     -- 2^51: a total's low part stays below (totals)
local SETTLE = 1125899906842624  -- 2^50: changes acquire_group lets add up (totals)
local FLOOR_AGE = 4398046511104  -- 2^42 us (~51 days): an older floor counts for nothing (limiter.FloorAge)
local FLOOR_WIDTH = 28           -- hexadecimal digits of a floor (see Floors; store/floors.go floorWidth)

local floor, fmod, max, min, sub, byte, rcall

-- enc(layout, ...) packs numbers; dec(layout, s) returns them (struct.unpack
-- adds the next position, which callers drop). See init.
local enc, dec

-- Reply codes. The scripts of one operation answer a table whose first
-- element is OK (configure: CREATED) or one of these; store/replies.go has
-- the same numbers under the same names.
local OK = 1
local UPDATED, CREATED = 200, 201 -- configure
local NOT_FOUND = -1         -- no such limiter (nor a template matching its name)
local PERMITS_RANGE = -2     -- {-2, max_permits}: n outside [1, max_permits]
local VERSION_MOVED = -3     -- configure's patch: the version is not the expected one
local KIND_CHANGE = -4       -- configure's patch: a change of kind, refused
local OTHER_KIND = -5        -- {-5, kind}: a limiter of a kind without a schedule
local NEED_BOUNDS = -6       -- {-6, now_us}: a calendar window needs its bounds (bounds.lua) first
-- acquire_many's codes: an answer's head (A_*), a request's record (R_*).
local A_OK, A_NOT_FOUND, A_OTHER_KIND, A_COUNTED, A_BOUNDS = 1, 3, 4, 5, 6
local R_DENIED, R_GRANTED, R_PERMITS_RANGE = 0, 1, 2 -- and a charge's, R_CHARGED_* (see charge_rec)

-- Kinds. A rate kind is one file, lua/<kind>.lua, which registers its row in
-- KINDS (limiter/kinds.go's row in Lua): its code (x's first byte,
-- limiter.KindInfo.Code), its parameters in x (params: 'name:format ...',
-- struct formats, after the slice), its fast path (below), and engine, a
-- function that makes its engine, the functions that differ from one kind to
-- another (engine_of makes it when a call first needs it: a script runs this
-- file on every call, and most calls, a fast path's, need none):
--   acquire(L, now, n, max_wait) decides a request on a started L (see acquire)
--   charge(L, now, n) (optional) takes n permits whatever is left on a
--     started L (a counting kind's: see charge); it returns fits, scheduled,
--     start and lateness
--   peek(L, now) returns wait and delay (peek.lua; L may change, unsaved)
--   reset(L, now) forfeits the backlog or the stored time (reset)
--   retune(L, now, NP) settles time passed under L's parameters before NP's
--     apply (retune; dispatched on the new kind, as limiter.Reconfigure)
--   floor(L, at) is the kind's part of apply_floor once next moved to at
--   settle(L) is how long, in ns, a paid-up instance takes to be no
--     different from a fresh one (settle_ms)
--   starts_at_creation: configure starts the schedule (smooth, as Guava)
--   rewinds: a hand-back may rewind the schedule (release.lua)
--   counts: a kind that counts permits against L.limit (window): its
--     answers carry the limit (acquire_many's A_COUNTED, peek's last field),
--     its wait is the permits left and its position the window's end
--   bounds(L, now) (optional) is true when the call needs the store's
--     calendar window bounds first (A_BOUNDS, NEED_BOUNDS: see window.lua);
--     set_bounds(L, now, e, f) takes them (bounds.lua)
-- and in the row itself:
--   fast (optional) is the path for one acquire (window's: or charge) on a
--     named limiter of the kind (fast_named) or an instance (see
--     create_instance): (key, x, n, max_wait, us, fl, fj, [tver,
--     idle_ttl]), fl and fj the call's floors and this limiter's place in
--     them (floor_read), the answer or nil for the general path; create
--     (optional) the same for an instance that does not exist: (key,
--     params, n, us, fl, fj, tver, idle_ttl), params the template's as
--     acquire_many has them (text); lean_* are the layout it reads and the
--     code it checks (checked in check_layouts); fast_many (optional) is
--     the path for many requests on one limiter (FAST_MANY). A kind file
--     may set these after its row, in a part only the function library
--     gets (window.lua's: see scriptText in lua/layout.go)
-- lib.lua and the operations dispatch through the engine (engine_of(L.kind))
-- and never name a kind. The kind files follow lib.lua in every script and in
-- the library (lua.Source, lua.Library), and then what is derived from the
-- rows and the field groups (see Layouts). Each kind file is a block of its
-- own (do ... end): its locals are its own.
local KINDS = {}

-- The packed value x (see Storage) is described once, in field_groups and
-- the kinds' params. A change of layout (a field added, removed, reordered
-- or resized) takes a new FORMAT, and load a migration from the previous
-- one: x carries its format in its second byte, and an x of a format this
-- file does not know is an error, never read by guess.
local FORMAT = 5 -- formats 1 (before last) and 2 (before the format byte) had none; 3 had no expires, 4 had it at the end

-- Layouts. A kind's x is HEAD, SLICE, the kind's params, STATE, RUN, REST.
-- lua/layout.go reads field_groups and the kinds' rows and derives from
-- them, once, what follows the kind files in every script and library:
-- X_OF[code], each kind's layout {kind (its row), fmt, size, names, at_last
-- (the bytes before last), params (the parameters in the order store/ sends
-- them: kind, the slice, the kind's params, version; limiter.KindInfo.Params),
-- load, pack}, with load and pack written out field by field, so that no call
-- walks the field groups (a script runs this file on every call, so what it
-- builds on every call is kept to this: no table per field). check_layouts
-- computes the same from field_groups and the rows, in Lua, and compares: on
-- a library's first call, and in store's tests.
local X_OF = {}
-- FAST[size] is the fast path (its row's fast) of the kind whose x has that
-- size, derived with X_OF: fast_named and the instance paths find it by x's
-- length, without a call. A fast path checks x's code; kinds of one size
-- have none here.
local FAST = {}
-- OLD_FORMATS are the earlier formats by size (binary only), and what load
-- inserts to make format 4's: format 3 lacks expires (at the end), format 2
-- also the format byte (after code), format 1 also last (after the totals'
-- low parts).
-- Only schedule (1) and smooth (2) had them. Built when an x of an earlier
-- format is read.
local OLD_FORMATS

-- H heads acquire_many's answer for a limiter: code A_OK, now_us, version,
-- instance, position (next after its requests, relative to now); R is one
-- decision: code, sched and start (relative to now), wait, retry_after. A
-- grant's delay is its start, its lateness start - sched; a denial's delay is
-- in start.
local H = '<Bi7i7Bi7'
local R = '<Bi7i7i7i7'
local HR = '<Bi7i7Bi7' .. 'Bi7i7i7i7' -- an answer with one R: H .. R

-- TEXT is 1 where x and replies are text (no struct), else 0; SEP joins packed
-- records: nothing in binary, a space in text.
local TEXT, SEP = 0, ''

-- SMALL holds the arguments most acquires take (one permit, no wait or
-- forever), so that reading them costs a table lookup, not tonumber's strtod.
local SMALL = {['0'] = 0, ['1'] = 1, ['-1'] = -1, ['-2'] = -2} -- (-2: a charge of one)

-- num is tonumber for the numbers limitd writes. Go's strconv 'g' and '%.17g'
-- write some numbers in exponent form without a point ("1e+06", "1e+21");
-- Redis's Lua reads them, but gopher-lua's tonumber (miniredis) returns nil for
-- any string without a '.' that is not an integer, so give it one.
local function num(s)
  local x = tonumber(s)
  if x == nil and type(s) == 'string' then x = tonumber((string.gsub(s, '[eE]', '.0e', 1))) end
  return x
end

-- Readings kept between calls: heads (head_of's) and made (a kind's create
-- reading a template's params). A function library's locals outlive its
-- calls, and a template's head (and its params) is the same string on every
-- call for it, of which Lua keeps one copy: so what was read of it once is
-- found again by a table lookup, far cheaper than the pattern match and
-- conversions that read it. A library's init makes them; a script, whose
-- tables would not outlive the call, keeps none (nil). Each counts its
-- entries at [0] and is emptied at 256.
local heads, made

-- init reads the globals (see above) and picks the packed form: binary where
-- Lua has struct, text otherwise; keep (a library) makes the tables of
-- readings kept between calls.
local function init(keep)
  if keep then heads, made = {[0] = 0}, {[0] = 0} end
  if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5: effects, for TIME
  floor, fmod, max, min, sub, byte = math.floor, math.fmod, math.max, math.min, string.sub, string.byte
  rcall = redis.call
  local struct = rawget(_G, 'struct')
  if struct then
    enc, dec = struct.pack, struct.unpack
    return
  end
  TEXT, SEP = 1, ' '
  enc = function(_, ...)
    return (string.format(string.rep('%.17g ', select('#', ...)), ...):sub(1, -2))
  end
  dec = function(_, s)
    local t, n = {}, 0
    for w in string.gmatch(s, '%S+') do
      n = n + 1
      t[n] = num(w)
    end
    return unpack(t, 1, n)
  end
end

-- floors_bin is the last floors argument a fast path found in binary: the
-- next limiters of the same call need not check its form again.
local floors_bin

-- floor_read reads the floor of the j-th limiter of a call's floors fl (see
-- Floors): fus and fah (ns ahead, FAR taken off), fus 0 for none.
local function floor_read(fl, j)
  if TEXT == 0 and byte(fl, 1) == 66 then -- 'B': binary
    local fus, fah = dec('<i8i8', fl, 2 + 16 * (j - 1))
    if fus == 0 then return 0, 0 end
    return fus, fah - FAR
  end
  local p = 1 + FLOOR_WIDTH * (j - 1)
  local fus = tonumber(sub(fl, p, p + 13), 16)
  if fus == 0 then return 0, 0 end
  return fus, tonumber(sub(fl, p + 14, p + FLOOR_WIDTH - 1), 16) - FAR
end

-- time_us is Redis's TIME in Unix us. Arithmetic converts TIME's two strings
-- itself, with one strtod each: tonumber converts a decimal string twice
-- (lua_isnumber, then lua_tonumber), at the cost of TIME's whole call again.
local function time_us()
  local t = rcall('TIME')
  return t[1] * 1000000 + t[2]
end

-- cost is limiter.Slice.Cost: n permits' whole ns and the new sub-ns carry.
local function cost(L, n, rem)
  local den = L.den
  local b = fmod(n, den)
  local t = rem + b * L.frac
  local r = fmod(t, den)
  return n * L.whole + (n - b) / den * L.frac + (t - r) / den, r
end

-- ttl_ms is settle_ms for an instance with the given debt (ns) and its
-- kind's settle (ns).
-- (In arithmetic, without a C function's call: the fast paths call it on
-- every acquire on an instance.)
local function ttl_ms(debt, idle_ttl_ms, settle)
  local ms
  if idle_ttl_ms > 0 then -- max(idle_ttl_ms, ceil(debt / 1e6))
    ms = debt / 1e6
    if ms <= idle_ttl_ms then return idle_ttl_ms end
  else -- max(1, ceil((debt + settle) / 1e6)), settle at most -idle_ttl_ms
    if idle_ttl_ms < 0 and settle > -idle_ttl_ms * 1e6 then settle = -idle_ttl_ms * 1e6 end
    ms = (debt + settle) / 1e6
    if ms <= 1 then return 1 end
  end
  local r = ms % 1
  if r == 0 then return ms end
  return ms - r + 1
end

-- instance_ttl is the TTL the fast paths give an instance whose key must
-- live ttl ms from now and whose recorded deadline does not cover that (see
-- Instance TTLs): ttl and an eighth more, as PEXPIRE's argument and in ms.
-- The deadline to record is now (Unix ms) + more - 1: a ms early, as Redis
-- counts the TTL from its time at the call's start.
local function instance_ttl(ttl)
  local more = ttl + (ttl - ttl % 8) / 8
  return string.format('%d', more), more -- ('%d': a number argument is not written as an integer in every Lua)
end

-- head_of reads the head of a template's requests (acquire_many): m, the
-- template's version, its idle_ttl_ms, its params (text) and its kind.
local function head_of(head)
  local h = heads and heads[head]
  if h then return h[1], h[2], h[3], h[4], h[5] end
  local m, version, ttl, params, kind = string.match(head, '^(%S+) (%S+) (%S+) ((%S+) .*)$')
  m, version, ttl = SMALL[m] or tonumber(m), SMALL[version] or version + 0, ttl + 0
  if heads then
    if heads[0] >= 256 then heads = {[0] = 0} end
    heads[head], heads[0] = {m, version, ttl, params, kind}, heads[0] + 1
  end
  return m, version, ttl, params, kind
end

-- plain_m is m of a head without a template (m alone), nil for a
-- template's head: one head_of knows is not converted (tonumber would try
-- strtod on it, for nothing).
local function plain_m(head)
  if heads and heads[head] then return nil end
  return tonumber(head)
end

-- fast_named is one acquire on a named limiter whose x was read (false: no
-- such key) by its kind's fast path (see Kinds): the answer, or nil.
local function fast_named(key, x, n, max_wait, us, fl, fj)
  if not x or TEXT == 1 then return nil end
  local fast = FAST[#x]
  return fast and fast(key, x, n, max_wait, us, fl, fj)
end

-- An instance of a template (head_of's version, idle_ttl, params and kind)
-- whose name no named limiter has takes its kind's fast path (FAST[#ix],
-- ix its key's value) when it exists, its kind's create when it does not:
-- both callers (acquire_fast, acquire_many) pick between the two themselves,
-- without a call in between. create_instance is the second.
local function create_instance(ikey, params, kind, n, us, fl, fj, version, idle_ttl)
  local K = KINDS[kind]
  return K and K.create and K.create(ikey, params, n, us, fl, fj, version, idle_ttl)
end

-- acquire_fast is acquire_many's answer to a call a fast path decides alone:
-- one acquire on one named limiter (the pair, or the pair and its floor) or
-- on one template's name (the floors, a head with one request). Otherwise it
-- returns nil and the keys' values it read (nil: none), for the general path.
local function acquire_fast(keys, argv, us)
  local na = #argv
  if na <= 3 then
    local x = rcall('GET', keys[1])
    local answer = fast_named(keys[1], x, argv[1], argv[2], us, argv[3], 1)
    if answer then return answer end
    return nil, {x}
  end
  if na == 4 and #keys == 2 then
    local xs = rcall('MGET', keys[1], keys[2])
    local h, m, version, idle_ttl, params, kind = heads and heads[argv[2]]
    if h then m, version, idle_ttl, params, kind = h[1], h[2], h[3], h[4], h[5]
    else m, version, idle_ttl, params, kind = head_of(argv[2]) end
    if m == 1 and not xs[1] and TEXT == 0 then -- an instance (see create_instance)
      local fl, ix, answer = argv[1], xs[2]
      if fl == '0' then fl = nil end
      if ix then
        local fast = FAST[#ix]
        answer = fast and fast(keys[2], ix, argv[3], argv[4], us, fl, 1, version, idle_ttl)
      else
        answer = create_instance(keys[2], params, kind, argv[3], us, fl, 1, version, idle_ttl)
      end
      if answer then return answer end
    end
    return nil, xs
  end
  return nil, nil
end

-- [rest] What follows is needed only off the fast paths: a script (not a
-- library) runs it only when acquire_fast does not answer (see lua.Source).

-- FAST_MANY[size] is the path for m (> 1) requests on one limiter (a
-- named one or an instance that exists) of the kind whose x has that size,
-- where the kind has one (window's window_many, the function library's
-- only): (key, x, m, argv, q, us, fl, fj, [tver, idle_ttl]), the requests'
-- pairs from argv[q] on; the answer, or nil for acquire_group.
local FAST_MANY = {}

-- engine_of returns a kind's engine, made on first use (see above).
local function engine_of(kind)
  local K = KINDS[kind]
  local E = K.made
  if not E then
    E = K.engine()
    K.made = E
  end
  return E
end

-- field_groups returns the groups, and the width of each struct format. A
-- function, so that a script builds them only when it checks them.
local function field_groups()
  local HEAD = {{'code', 'B'}, {'format', 'B'}, {'version', 'i7'}}
  local SLICE = {{'whole', 'i7'}, {'frac', 'I4'}, {'den', 'I4'}, {'max_permits', 'i7'}}
  local STATE = {{'started', 'B'}, {'epoch', 'i7'}}
  -- RUN is what one acquire changes: the schedule (next, pace, rem), the
  -- totals' low parts, last. It comes right after what a fast path reads
  -- before it, so that it reads a prefix and rewrites this one run.
  local RUN = {{'next', 'i7'}, {'pace', 'i7'}, {'rem', 'I4'}, {'allocated', 'i7'}, {'idle', 'i7'},
    {'permits', 'i7'}, {'lateness', 'i7'}, {'last', 'i7'}}
  -- REST starts with expires, which only an instance's fast path reads.
  local REST = {{'expires', 'i7'}, {'origin', 'i7'}, {'stored', 'i7'},
    {'allocated_hi', 'i4'}, {'idle_hi', 'i4'}, {'permits_hi', 'i4'}, {'lateness_hi', 'i4'}}
  local WIDTH = {B = 1, I4 = 4, i4 = 4, i7 = 7, d = 8}
  return HEAD, SLICE, STATE, RUN, REST, WIDTH
end

-- fields_of reads a row's params ('name:format ...') as a group of fields.
local function fields_of(params)
  local g = {}
  for name, f in string.gmatch(params, '([%w_]+):(%w+)') do g[#g + 1] = {name, f} end
  return g
end

-- check_layouts computes every kind's layout from the field groups and its
-- row and errors unless it is what lua/layout.go derived (X_OF) and what a
-- kind's fast path reads (lean_*). It returns the number of kinds.
local function check_layouts()
  local HEAD, SLICE, STATE, RUN, REST, WIDTH = field_groups()
  local function walk(groups)
    local names, fmts, size = {}, {}, 0
    for _, g in ipairs(groups) do
      for _, f in ipairs(g) do
        names[#names + 1], fmts[#fmts + 1], size = f[1], f[2], size + WIDTH[f[2]]
      end
    end
    return table.concat(names, ' '), '<' .. table.concat(fmts), size
  end
  -- tail_of is walk's names and format of REST's first fields, as many as
  -- a fast path says it reads after RUN (lean_tail)
  local function tail_of(rest, names)
    local g = {}
    for _ in string.gmatch(names, '%S+') do g[#g + 1] = rest[#g + 1] end
    local tnames, tfmt = walk({g})
    return tnames .. '|' .. tfmt
  end
  local n = 0
  for name, K in pairs(KINDS) do
    n = n + 1
    local X, P = X_OF[K.code], fields_of(K.params)
    local names, fmt, size = walk({HEAD, SLICE, P, STATE, RUN, REST})
    local _, _, rest = walk({REST})
    local pnames = walk({SLICE, P})
    if not X or X.kind ~= K or X.name ~= name or X.names ~= names or X.fmt ~= fmt or X.size ~= size or
        X.at_last ~= size - rest - WIDTH.i7 or X.params ~= 'kind ' .. pnames .. ' version' then
      error('lib.lua: the layout of ' .. name .. ' is not its field groups\'')
    end
    if K.lean_fmt then
      local lnames, lfmt, lsize = walk({HEAD, SLICE, P, STATE, RUN})
      local _, rfmt, rsize = walk({RUN})
      if lnames ~= K.lean_names or lfmt ~= K.lean_fmt or rfmt ~= K.lean_run or size ~= K.lean_size or
          K.lean_code ~= K.code or (FAST[size] and FAST[size] ~= K.fast) or
          (FAST_MANY[size] and FAST_MANY[size] ~= K.fast_many) or
          (K.create and (K.lean_full[1] .. sub(K.lean_full[2], 2) ~= fmt or K.lean_params ~= X.params)) or
          tostring(lsize - rsize) ~= K.lean_run_at or
          (K.lean_expires_at and (REST[1][1] ~= 'expires' or K.lean_expires_at ~= tostring(lsize) or
            K.lean_fmt_i ~= lfmt .. REST[1][2])) or
          (K.lean_tail and (K.lean_tail .. '|<' .. K.lean_tail_fmt) ~= tail_of(REST, K.lean_tail)) or
          (K.lean_origin_at and (REST[2][1] ~= 'origin' or K.lean_origin_at ~= lsize + WIDTH[REST[1][2]] + 1)) then
        error('lib.lua: the fast path of ' .. name .. ' reads a layout that is not its field groups\'')
      end
    end
  end
  for code, X in pairs(X_OF) do
    if X.kind.code ~= code then error('lib.lua: a layout without its kind: ' .. code) end
  end
  return n
end

local function fmt(x) return string.format('%.17g', x) end


-- load reads a limiter's x at key (inst: a template instance's) into a table
-- L, or decodes it when the caller has read it already (false: no such key):
-- numbers for params, state and totals, nil if the key does not exist. A
-- limiter of a kind without a schedule (share, concurrency) is {key, kind,
-- other = true}. L.x keeps what was read, so that save writes only a change.
local function load(key, inst, x)
  if x == nil then x = rcall('GET', key) end
  if not x then return nil end
  local code = string.byte(x, 1) - 48 * TEXT -- text: the digit
  local X = X_OF[code]
  -- a share or concurrency limiter: x is its kind (configure_lease.lua)
  if not X then return {key = key, kind = x, version = 0, other = true} end
  if TEXT == 0 and #x ~= X.size then -- an earlier format (see OLD_FORMATS)
    if not OLD_FORMATS then
      OLD_FORMATS = {}
      for c = 1, 2 do
        local Y = X_OF[c]
        OLD_FORMATS[Y.size - 7] = {code = c, byte = 2}                    -- format 3
        OLD_FORMATS[Y.size - 8] = {code = c, byte = 1}                    -- format 2
        OLD_FORMATS[Y.size - 15] = {code = c, byte = 1, last = Y.at_last - 1} -- format 1
      end
    end
    local old = OLD_FORMATS[#x]
    if not old or old.code ~= code then error('limitd: ' .. key .. ': packed state of ' .. #x .. ' bytes') end
    if old.last then x = string.sub(x, 1, old.last) .. enc('<i7', 0) .. string.sub(x, old.last + 1) end
    x = string.sub(x, 1, 1) .. enc('<B', 4) .. string.sub(x, old.byte + 1) .. enc('<i7', 0)
  end
  if TEXT == 0 and byte(x, 2) == 4 then -- format 4: expires at the end, now after last
    local at = X.at_last + 7
    x = string.sub(x, 1, 1) .. enc('<B', FORMAT) .. string.sub(x, 3, at) .. string.sub(x, -7) ..
      string.sub(x, at + 1, -8)
  end
  -- X.load makes L in one table constructor with every field (adding fields
  -- later would grow, rehash, the table, which costs more than the rest of a
  -- load).
  local L = X.load(key, inst, x, dec)
  if L.format ~= FORMAT then
    error('limitd: ' .. key .. ': packed state of format ' .. tostring(L.format) .. ', not ' .. FORMAT)
  end
  L.stable = L.whole + L.frac / L.den
  return L
end

-- param_names are X's params (see Layouts) as a list, made on first use.
local function param_names(X)
  local P = X.plist
  if not P then
    P = {}
    for f in string.gmatch(X.params, '%S+') do P[#P + 1] = f end
    X.plist = P
  end
  return P
end

-- params_from copies engine parameters from argv (in the order of the
-- kind's params, the kind first: see Layouts) into L, and the slice as a
-- double (stable, as load does).
local function params_from(L, argv, i)
  local kind = argv[i]
  local K = KINDS[kind]
  if not K then error('limitd: no rate kind ' .. tostring(kind)) end
  local P = param_names(X_OF[K.code])
  L.kind = kind
  for j = 2, #P do L[P[j]] = num(argv[i + j - 1]) end
  L.stable = L.whole + L.frac / L.den
end

-- take_params gives L the parameters in NP (params_from's), and 0 for the
-- other kinds' (as load makes them: a kind changed by a template's new
-- version must not answer with its old kind's, a schedule's burst say).
local function take_params(L, NP)
  for kind, K in pairs(KINDS) do
    if kind ~= NP.kind then
      for name in string.gmatch(K.params, '([%w_]+):') do L[name] = 0 end
    end
  end
  for _, f in ipairs(param_names(X_OF[KINDS[NP.kind].code])) do L[f] = NP[f] end
  L.stable = NP.stable
end

-- tpl_params returns a template's parameters as a table (params_from's). A
-- template (tpl) is {version = its version} and either argv and i (its
-- params, see Layouts, in argv from i on) or text (the same one space apart,
-- acquire_many).
local function tpl_params(tpl)
  local NP = {}
  if tpl.argv then
    params_from(NP, tpl.argv, tpl.i)
  else
    local words = {}
    for w in string.gmatch(tpl.text, '%S+') do words[#words + 1] = w end
    params_from(NP, words, 1)
  end
  return NP
end

-- carry brings the low part of a total back into [0, 2^32), exactly (|lo| <
-- 2^53).
local function carry(lo, hi)
  local r = fmod(lo, B32)
  if r < 0 then r = r + B32 end
  return r, hi + (lo - r) / B32
end

-- big_gap is d * 1000 - c exactly as {lo, hi} (hi * 2^32 + lo), for integers
-- 0 <= d < 2^53, |c| < 2^53: the idle time of a limiter left alone for
-- months, which a double cannot hold to the ns.
local function big_gap(d, c)
  local dl, cl = fmod(d, B32), fmod(c, B32)
  local lo, hi = carry(dl * 1000 - cl, (d - dl) / B32 * 1000 - (c - cl) / B32)
  return {lo, hi}
end

-- totals are L's totals with this call's changes, as allocated,
-- allocated_hi, idle, idle_hi, permits, permits_hi, lateness, lateness_hi
-- (each total hi * 2^32 + lo, 0 <= lo < LOW). A low part is carried into the
-- high one only once it reaches LOW, so most calls change low parts only
-- (schedule's acquire_one). Exact while lo plus the changes stays below 2^53: one
-- acquire adds less than 2^52 + 2^41 (a forfeit of up to FAR beyond the
-- rebase), and acquire_group settles more at SETTLE.
local function totals(L)
  local al, al_hi, idle, idle_hi = L.allocated, L.allocated_hi, L.idle, L.idle_hi
  local pm, pm_hi, late, late_hi = L.permits, L.permits_hi, L.lateness, L.lateness_hi
  local x = L.xidle
  if x then idle, idle_hi = idle + x[1], idle_hi + x[2] end
  al, idle, pm, late = al + L.d_allocated, idle + L.d_idle, pm + L.d_permits, late + L.d_lateness
  if al >= LOW or al < 0 then al, al_hi = carry(al, al_hi) end
  if idle >= LOW or idle < 0 then idle, idle_hi = carry(idle, idle_hi) end
  if pm >= LOW or pm < 0 then pm, pm_hi = carry(pm, pm_hi) end
  if late >= LOW or late < 0 then late, late_hi = carry(late, late_hi) end
  return al, al_hi, idle, idle_hi, pm, pm_hi, late, late_hi
end

-- now_rel is the current time in ns relative to L's epoch; it starts the epoch
-- for a new limiter and rebases it once it has run for REBASE ns.
--
-- A limiter left alone for months would see next - now fall below -2^53, where
-- a double no longer holds every ns. Nothing needs next that far back: every use
-- of a schedule pointer behind now forfeits all but max_backlog (<= HORIZON) of
-- the gap as idle (forfeit), and a smooth limiter stores at most cap (<= 1e15
-- ns) of it (resync). So when next would fall more than FAR behind, the part of
-- the gap beyond FAR is counted as idle at once, exactly (L.xidle, {lo, hi}), and
-- next is kept FAR behind: the totals and every later result are those of the
-- unsettled gap.
--
-- A now before last is a clock step back (see Clock steps): the epoch moves
-- back by the step (a whole number of us: both are), so that the limiter's
-- time stands at last, and its times, relative to the epoch, stay as they were.
local function now_rel(L, us)
  if L.started == 0 and L.epoch == 0 then L.epoch = us end
  local now = (us - L.epoch) * 1000
  if now < L.last then
    L.epoch = L.epoch - (L.last - now) / 1000
    now = L.last
  end
  if now >= REBASE then
    if L.started == 1 and now - L.next > FAR then
      L.xidle = big_gap(us - L.epoch, L.next + FAR)
      L.next = -FAR
      L.pace = -2 * HORIZON -- pace <= next + 2 * HORIZON: it would be clamped below
    else
      L.next = L.next - now
      L.pace = max(L.pace - now, -2 * HORIZON) -- a pace that far back no longer matters
    end
    L.last = max(L.last - now, -2 * HORIZON) -- as the pace: a step back that far is none that matters
    L.epoch = us
    now = 0
  end
  return now
end

-- start is limiter.Params.Start.
local function start(L, now, us)
  if L.started == 1 then return end
  L.started, L.origin, L.next, L.pace, L.rem, L.stored, L.last = 1, us, now, now, 0, L.initial, now
end

-- floor_at reads the floor of the j-th limiter of fl (floor_read): fus,
-- fah, fus 0 for none (fl nil or '0': none at all).
local function floor_at(fl, j)
  if not fl or fl == '0' then return 0, 0 end
  return floor_read(fl, j)
end

-- born_after is limiter.Params.bornAfter: L (a kind that does not count)
-- started after the floor seen at fus (us), which is younger than twice its
-- ahead fah (ns, clamped): the schedule that floor saw is gone, and its queue
-- may have held slots beyond now (see "A state born after its floor" in
-- limiter/floor.go), and whose clock did not step back behind its origin
-- (last, relative to the epoch, before it).
local function born_after(L, us, fus, fah)
  return L.origin > fus and (L.origin - L.epoch) * 1000 <= L.last and (us - fus) * 1000 < 2 * fah and
    not engine_of(L.kind).counts
end

-- apply_floor is limiter.Params.ApplyFloor for a started L: fus (Unix us)
-- and fah (ns) are the floor's Seen and Ahead. fus - L.epoch is exact and, once
-- the floor is younger than FLOOR_AGE, small enough that the position is too.
local function apply_floor(L, now, us, fus, fah)
  if us - fus >= FLOOR_AGE then return end
  fah = min(max(fah, -FAR), 2 * HORIZON)
  local at
  if us < fus then at = now + fah else at = (fus - L.epoch) * 1000 + fah end
  if at <= now - FAR then return end
  -- A floor behind next still finds the state lost when the state started
  -- after the floor was seen, within twice its ahead (born_after).
  if at <= L.next and not born_after(L, us, fus, fah) then return end
  -- The state lost what the floor saw: since then, a schedule its callers
  -- kept ahead of the clock moved on with it (see limiter.Params.ApplyFloor).
  at = max(at, now + fah)
  if at <= L.next then return end
  L.d_idle = L.d_idle + (at - L.next)
  L.next = at
  engine_of(L.kind).floor(L, at)
end

-- floored is now_rel(L, us) once the j-th floor of a call's floors fl
-- (floor_at), if any, is applied to L (started for it): the first steps of
-- every decision on a rate limiter.
local function floored(L, us, fl, j)
  local now = now_rel(L, us)
  local fus, fah = floor_at(fl, j)
  if fus ~= 0 then
    start(L, now, us)
    apply_floor(L, now, us, fus, fah)
  end
  return now
end

-- acquire is limiter.Params.acquire. It returns granted (1 or 0), permits,
-- scheduled, start, delay, lateness, wait and retry_after, times relative to
-- L's epoch (the kind's acquire: see Kinds).
local function acquire(L, now, us, n, max_wait)
  if max_wait < 0 then max_wait = 0 end
  if max_wait > HORIZON then max_wait = HORIZON end
  start(L, now, us)
  return engine_of(L.kind).acquire(L, now, n, max_wait)
end

-- copy_of is a copy of L to decide a check on (nothing it changes is kept).
local function copy_of(L)
  local C = {}
  for k, v in pairs(L) do C[k] = v end
  return C
end

-- Charges (limiter/charge.go): n permits taken whatever is left. MAX_AHEAD
-- is limiter.MaxAhead, the furthest a schedule runs ahead of now.
local MAX_AHEAD = 2 * HORIZON

-- max_charge is limiter.Params.MaxCharge: the most permits whose cost, with
-- the largest carry, is at most HORIZON (limiter.Slice.MaxPermits).
local function max_charge(L)
  local n = floor(HORIZON / L.stable)
  while n > 0 and cost(L, n, L.den - 1) > HORIZON do n = n - 1 end
  while cost(L, n + 1, L.den - 1) <= HORIZON do n = n + 1 end
  return n
end

-- charge is limiter.Params.Charge for 0 <= n <= max_charge(L): it returns
-- fits (whether the permits would have been granted within max_wait),
-- scheduled, start and lateness (as an acquire that waits as long as it
-- takes places them; a counting kind's: now, now, 0), and the limiter's
-- delay and wait after the charge. A kind with its own charge (window's)
-- counts; the others' state moves as for that acquire, granted whatever
-- its delay, then is kept within MAX_AHEAD of now. A charge of 0 is a
-- check: time passes on L (the kind's peek: forfeit, resync or roll), and
-- it is decided on a copy.
local function charge(L, now, us, n, max_wait)
  if max_wait < 0 then max_wait = 0 end
  if max_wait > HORIZON then max_wait = HORIZON end
  start(L, now, us)
  local E = engine_of(L.kind)
  if n == 0 then
    E.peek(L, now)
    L = copy_of(L)
  end
  local fits, sched, st, late, count
  if E.charge then
    fits, sched, st, late, count = E.charge(L, now, n)
  else
    local granted, permits, delay
    granted, permits, sched, st, delay, late = E.acquire(L, now, n, math.huge) -- granted: it waits
    fits = delay <= max_wait
    local over = L.next - (now + MAX_AHEAD)
    if over > 0 then
      L.next = L.next - over
      L.d_allocated = L.d_allocated - over
    end
    if L.pace > now + MAX_AHEAD then L.pace = now + MAX_AHEAD end
  end
  local wait, delay = E.peek(L, now) -- nothing is left to forfeit, roll or resync at now
  return fits, sched, st, delay, late, wait, count or 0
end

-- settle moves this call's changes into L's totals.
local function settle(L)
  L.allocated, L.allocated_hi, L.idle, L.idle_hi, L.permits, L.permits_hi, L.lateness, L.lateness_hi = totals(L)
  L.d_allocated, L.d_idle, L.d_permits, L.d_lateness, L.xidle = 0, 0, 0, 0, nil
end

-- pack returns L's x (see Storage), settling this call's changes into its
-- totals.
local function pack(L)
  settle(L)
  local code = KINDS[L.kind].code
  L.code, L.format = code, FORMAT
  return X_OF[code].pack(L, enc)
end

-- settle_ms is how long an instance must be kept: never less than its debt
-- (while it owes, a fresh instance would grant again what it granted), then
-- the template's idle_ttl when one is set (idle_ttl_ms > 0); else until its
-- state is no different from a fresh one (stored time full or backlog
-- forfeited) but at most -idle_ttl_ms after the debt (store.DefaultIdleTTL,
-- sent negative), 0 for no bound.
local function settle_ms(L, now, idle_ttl_ms)
  local settle = 0
  if idle_ttl_ms <= 0 then settle = engine_of(L.kind).settle(L) end
  return ttl_ms(max(0, L.next - now, L.pace - now), idle_ttl_ms, settle)
end

-- save writes L back if this call changed it: a named limiter's state key, or
-- an instance's key with a TTL, settle_ms(L, now, idle_ttl_ms), recorded in
-- expires (see Instance TTLs). Without now an instance keeps the TTL it has
-- (expires 0: PTTL's whole ms may fall short of it). An unchanged instance
-- with an idle_ttl gets it anew (every use counts); one without keeps its
-- TTL, which still covers an unchanged state.
local function save(L, now, idle_ttl_ms)
  local x = pack(L)
  local changed = x ~= L.x
  L.x = x
  if not L.inst then
    if changed then rcall('SET', L.key, x) end
    return
  end
  if not now then
    if not changed then return end
    local ttl = rcall('PTTL', L.key)
    L.expires = 0
    L.x = pack(L)
    if ttl > 0 then rcall('SET', L.key, L.x, 'PX', ttl) else rcall('SET', L.key, L.x) end
    return
  end
  local ttl = settle_ms(L, now, idle_ttl_ms)
  if changed or idle_ttl_ms > 0 then
    -- Redis counts the TTL from its time at the call's start, at most a ms
    -- before TIME's: the deadline recorded is that much earlier
    L.expires = floor((L.epoch + floor(now / 1000)) / 1000) + ttl - 1
    L.x = pack(L)
    rcall('SET', L.key, L.x, 'PX', ttl)
  end
end

-- fresh is a limiter that has never been stored, without parameters (see
-- take_params): blank's, derived (see Layouts), has every field of L.
local blank
local function fresh(key, inst) return blank(key, inst) end

-- retune is limiter.Reconfigure: settle time passed under L's old parameters
-- (the new kind's retune, as limiter.Reconfigure), then take the new ones
-- (NP, see params_from) keeping the schedule.
local function retune(L, now, NP)
  if L.started == 1 then
    L.last = now
    if L.whole ~= NP.whole or L.frac ~= NP.frac or L.den ~= NP.den then L.rem = 0 end
    engine_of(NP.kind).retune(L, now, NP)
  end
  take_params(L, NP)
end

-- reset is limiter.Params.Reset.
local function reset(L, now)
  if L.started ~= 1 then return end
  L.last = now
  engine_of(L.kind).reset(L, now)
end

-- resolve finds the limiter a call is about: the named limiter (its state
-- key, key) if it exists, else the template instance (ikey) when a template
-- matches the name (tpl, see tpl_params). It returns L (nil: not found),
-- which is an instance when L.inst. An instance is created on first use and
-- moved to a newer template version in place; the template's parameters are
-- only read then. x and ix are key's and ikey's x if the caller has read them.
local function resolve(key, ikey, tpl, us, x, ix)
  local L = load(key, false, x)
  if L then return L end
  if not tpl then return nil end
  L = load(ikey, true, ix)
  if L and (L.other or tpl.version <= L.version) then return L end
  local NP = tpl_params(tpl)
  if not L then
    L = fresh(ikey, true)
    take_params(L, NP)
  else
    retune(L, now_rel(L, us), NP)
  end
  return L
end

-- resolve_keys is resolve for the scripts that take KEYS = {limiter,
-- instance} and the template's parameters, if any, from argv[i] on.
local function resolve_keys(keys, argv, i, us)
  local tpl
  if #argv >= i then tpl = {argv = argv, i = i, version = tonumber(argv[#argv])} end -- version: the last
  return resolve(keys[1], keys[2], tpl, us)
end

-- grant_main is the body of grant.lua: n permits for a client pool, with
-- what the pool needs to place each permit and to hand unused ones back.
-- ARGV: n, max_wait (ns; negative: forever), idle_ttl_ms, floor (see Floors;
-- '0': none), [template params...].
-- Reply: {code, granted, permits, epoch, sched, start, delay, lateness, wait,
-- retry_after, version, now_us, instance, rem_before, next_after, whole,
-- frac, den, burst, kind, max_permits[, limit]} with times relative to
-- epoch (Unix us), instance 1 when a template instance answered, next_after
-- the position, and a kind that counts (window) its limit last.
-- code 1 is ok, -1 not found, -2 permits out of range ({-2, max}), -5 a
-- limiter of another kind ({-5, kind}).
local function grant_main(keys, argv)
  local us = time_us()
  local L = resolve_keys(keys, argv, 5, us)
  if not L then return {NOT_FOUND} end
  if L.other then return {OTHER_KIND, L.kind} end
  local n, max_wait = tonumber(argv[1]), tonumber(argv[2])
  if n < 1 or n > L.max_permits or n ~= floor(n) then return {PERMITS_RANGE, L.max_permits} end
  if max_wait < 0 then max_wait = HORIZON end
  local now = floored(L, us, argv[4], 1)
  local bounds = engine_of(L.kind).bounds
  if bounds then
    start(L, now, us)
    if bounds(L, now) then return {NEED_BOUNDS, us} end
  end
  local rem_before = L.rem
  if L.started ~= 1 then rem_before = 0 end -- start's carry
  local granted, permits, sched, st, delay, late, wait, retry = acquire(L, now, us, n, max_wait)
  save(L, now, tonumber(argv[3]))
  local out = {OK, granted, permits, L.epoch, sched, st, delay, late, wait, retry, L.version, us, L.inst and 1 or 0,
    rem_before, L.next, L.whole, L.frac, L.den, fmt(L.burst), L.kind, L.max_permits}
  if engine_of(L.kind).counts then out[22] = L.limit end
  return out
end

-- decision_rec is one decision's R in acquire_many's answer (a counting
-- kind's, A_COUNTED, has its limit where a schedule's has sched), and
-- answer_head the H before a limiter's records.
local function decision_rec(L, counts, now, granted, sched, st, delay, wait, retry)
  if counts then return enc(R, granted, L.limit, delay, wait, retry) end
  if granted == 1 then return enc(R, R_GRANTED, sched - now, st - now, wait, retry) end
  return enc(R, R_DENIED, 0, delay, wait, retry)
end

-- The records of charges (acquire_many): n taken, and it fitted (within
-- max_wait) or not; a charge of n out of range (max_charge in sched's
-- place). A charge's record holds the limiter's delay after it where an
-- acquire's holds retry_after (a counting kind's: where its delay is, and
-- its count after the charge where retry_after is). store/replies.go has
-- the same numbers.
local R_CHARGED_WITHIN, R_CHARGED_OVER, R_CHARGE_RANGE = 3, 4, 5

local function charge_rec(L, counts, now, fits, sched, st, delay, wait, count)
  local code = R_CHARGED_OVER
  if fits then code = R_CHARGED_WITHIN end
  if counts then return enc(R, code, L.limit, delay, wait, count) end
  return enc(R, code, sched - now, st - now, wait, delay)
end

local function answer_head(L, counts, us, now)
  return enc(H, counts and A_COUNTED or A_OK, us, L.version, L.inst and 1 or 0, L.next - now)
end

-- acquire_group is acquire_many's answer for the m requests of one limiter,
-- whose pairs start at argv[q] (ikey, tpl and idle_ttl: its instance key,
-- template and idle TTL, if a template matches; x and ix: the x of its keys,
-- if read already; fl, fj: the call's floors and this limiter's place in
-- them, see floor_at).
local function acquire_group(key, ikey, tpl, idle_ttl, m, argv, q, us, x, ix, fl, fj)
  local L = resolve(key, ikey, tpl, us, x, ix)
  if not L then return enc('<B', A_NOT_FOUND) end
  if L.other then -- its kind: a length and the name (text: the name)
    if TEXT == 1 then return A_OTHER_KIND .. ' ' .. L.kind end
    return enc('<BB', A_OTHER_KIND, #L.kind) .. L.kind
  end
  local now = floored(L, us, fl, fj)
  local recs, decided = {false}, false
  local E = engine_of(L.kind)
  local counts, bounds = E.counts, E.bounds
  for r = 1, m do
    local n, max_wait = argv[q], argv[q + 1]
    n, max_wait = SMALL[n] or tonumber(n), SMALL[max_wait] or tonumber(max_wait)
    q = q + 2
    local rec, charged
    if n < 1 or n > L.max_permits or n ~= floor(n) then
      if n < 0 and n == floor(n) then -- a charge of n permits travels as -1 - n
        n, charged = -1 - n, true
        if cost(L, n, L.den - 1) > HORIZON then rec = enc(R, R_CHARGE_RANGE, max_charge(L), 0, 0, 0) end
      else
        rec = enc(R, R_PERMITS_RANGE, L.max_permits, 0, 0, 0)
      end
    end
    if rec then
      recs[r + 1] = rec
    else
      if bounds and not decided then -- before the first decision: nothing is saved
        start(L, now, us)
        if bounds(L, now) then return enc('<Bi7', A_BOUNDS, us) end
      end
      if max_wait < 0 then max_wait = HORIZON end
      if charged then
        local fits, sched, st, delay, _, wait, count = charge(L, now, us, n, max_wait)
        recs[r + 1] = charge_rec(L, counts, now, fits, sched, st, delay, wait, count)
      else
        local granted, _, sched, st, delay, _, wait, retry = acquire(L, now, us, n, max_wait)
        recs[r + 1] = decision_rec(L, counts, now, granted, sched, st, delay, wait, retry)
      end
      decided = true
      -- Many requests' changes could pass 2^53 together (totals).
      if L.d_allocated >= SETTLE or L.d_idle >= SETTLE or L.d_permits >= SETTLE or L.d_lateness >= SETTLE then settle(L) end
    end
  end
  -- Requests that were all refused change nothing (an instance is neither
  -- created nor moved to a new template version).
  if decided then save(L, now, idle_ttl) end
  recs[1] = answer_head(L, counts, us, now)
  return table.concat(recs, SEP)
end

-- acquire_many is the body of acquire.lua: any number of acquires on any
-- number of limiters, decided at one Redis time, each limiter read and written
-- once. A limiter's requests are decided in order, as if they came one after
-- the other at that time.
-- KEYS: each limiter's state key, followed by its instance key when a
-- template matches its name.
-- ARGV: the floors (see Floors: FLOOR_WIDTH digits per limiter in KEYS
-- order, or '0' for none), then per limiter, in KEYS order, a head and m
-- pairs n, max_wait (ns; negative: forever); a pair whose n is negative is
-- a charge of -1 - n permits (charge: taken whatever is left; -1 is a
-- check), which only window's fast path takes (schedule's: n < 1). The
-- head is m, or when a template matches, one string: m, the template's
-- version, its idle_ttl_ms
-- and its params (see Layouts; version last, again), one space apart.
-- One acquire on one limiter without a template may come as the pair alone,
-- or as the pair and its floor (3 arguments).
-- Reply: one string, the limiters' answers in KEYS order. An answer is H (1,
-- now_us, version, instance 0 or 1, position: next relative to now after its
-- requests), then one R per request: code (0 denied,
-- 1 granted, 2 n out of range, with the maximum as sched), sched, start
-- (relative to now), wait, retry_after; or 3 (not found); or 4 (a limiter of
-- another kind) and its kind's name, after its length; or 5 (A_COUNTED, a
-- kind that counts: a window) as 1 but each R is code, limit, delay (0 for a
-- grant, which starts now), permits left, retry_after; a charge's R has
-- code 3 (R_CHARGED_WITHIN) or 4 (R_CHARGED_OVER) and the limiter's delay
-- after it in retry_after's place (a counting kind's: in delay's, and
-- retry_after 0), or 5 (R_CHARGE_RANGE) and max_charge; or 6 (A_BOUNDS) and
-- now_us: a calendar window needs its bounds first (bounds.lua), nothing
-- was decided. In text (no struct)
-- the numbers and the name are one space apart.
local function acquire_many(keys, argv)
  local us = time_us()
  local answer, xs = acquire_fast(keys, argv, us)
  if answer then return answer end
  local na = #argv
  if na <= 3 then -- the pair alone, or and its floor
    return acquire_group(keys[1], nil, nil, 0, 1, argv, 1, us, xs[1], nil, argv[3], 1)
  end
  if not xs then -- every key's x, read at once for many limiters
    xs = {}
    if #keys > 1 then xs = rcall('MGET', unpack(keys)) end
  end
  local fl = argv[1]
  if fl == '0' then fl = nil end
  local out = {}
  local j, k, a = 0, 1, 2
  while a <= na do
    j = j + 1
    local head = argv[a]
    local m = SMALL[head]
    local h = not m and heads and heads[head] -- a template's head head_of knows
    if not (m or h) then m = tonumber(head) end -- nil: a template's head
    if m then -- no template
      local x = xs[k]
      if x == nil then x = rcall('GET', keys[k]) end
      if m == 1 then
        answer = fast_named(keys[k], x, argv[a + 1], argv[a + 2], us, fl, j)
      elseif x and TEXT == 0 and FAST_MANY[#x] then
        answer = FAST_MANY[#x](keys[k], x, m, argv, a + 1, us, fl, j)
      end
      out[j] = answer or acquire_group(keys[k], nil, nil, 0, m, argv, a + 1, us, x, nil, fl, j)
      k = k + 1
    else
      local version, idle_ttl, params, kind
      if h then m, version, idle_ttl, params, kind = h[1], h[2], h[3], h[4], h[5]
      else m, version, idle_ttl, params, kind = head_of(head) end
      local ikey = keys[k + 1]
      local ix = xs[k + 1]
      if m == 1 and not xs[k] and TEXT == 0 then -- an instance (see create_instance)
        if ix then
          local fast = FAST[#ix]
          answer = fast and fast(ikey, ix, argv[a + 1], argv[a + 2], us, fl, j, version, idle_ttl)
        else
          answer = create_instance(ikey, params, kind, argv[a + 1], us, fl, j, version, idle_ttl)
        end
      elseif ix and not xs[k] and TEXT == 0 and FAST_MANY[#ix] then
        answer = FAST_MANY[#ix](ikey, ix, m, argv, a + 1, us, fl, j, version, idle_ttl)
      end
      out[j] = answer or acquire_group(keys[k], ikey, {text = params, version = version}, idle_ttl, m, argv, a + 1, us,
        xs[k], xs[k + 1], fl, j)
      k = k + 2
    end
    answer = nil
    a = a + 1 + 2 * m
  end
  if j == 1 then return out[1] end
  return table.concat(out, SEP)
end

if not redis.register_function then init() end -- a script, not a library (see Globals)
