-- acquire_all: several limiters in one call, all or nothing. Every limiter
-- is decided at one Redis time, in memory, before anything is written: the
-- call writes only when every request is granted (or refused but optional),
-- and then writes each limiter once, as acquire does. A refused call writes
-- nothing at all, so every key is left exactly as it was (bytes and TTL),
-- and an instance it would have created does not exist afterwards.
--
-- KEYS: as acquire.lua, each limiter's state key, followed by its instance
-- key when a template matches its name; each limiter once.
-- ARGV: the floors (as acquire.lua's), the mode ('1': write if all grant;
-- '0': decide and write nothing, a dry run; '2': as '1', and the reply also
-- tells what was written, for the store to undo it should another group of
-- the call refuse, see restore.lua), then per limiter in KEYS order a head
-- (as acquire.lua's, with m = 1) and a triple n, max_wait, optional: n 0 is a
-- check (decided as if n were 0, on a copy: nothing is taken even when the
-- call writes), optional 1 a request whose refusal does not refuse the call
-- (shadow mode: it takes nothing).
-- Reply: {answers, written...}: answers is one string of the limiters'
-- answers in KEYS order, each as acquire.lua's (H and one R; or 3, or 4 and
-- a kind); an R code 2 (n out of range) refuses the call as a denial does.
-- written (mode '2', when the call wrote) is per limiter written four values:
-- its key, the x it held before ('' for none), its PTTL before (ms; -1 for
-- none) and the x written, then (last) the call's Redis time in us.

local function acquire_all(keys, argv)
  local us = time_us()
  local xs = rcall('MGET', unpack(keys))
  local fl, mode = argv[1], argv[2]
  if fl == '0' then fl = nil end
  local out, Ls, ok = {}, {}, true
  local j, k, a = 0, 1, 3
  while a <= #argv do
    j = j + 1
    local head = argv[a]
    local m = SMALL[head] or plain_m(head)
    local key, ikey, tpl, idle_ttl, x, ix = keys[k], nil, nil, 0, xs[k], nil
    if m then
      k = k + 1
    else
      local version, params
      m, version, idle_ttl, params = head_of(head)
      ikey, tpl, ix = keys[k + 1], {text = params, version = version}, xs[k + 1]
      k = k + 2
    end
    local n, max_wait, optional = tonumber(argv[a + 1]), tonumber(argv[a + 2]), argv[a + 3] == '1'
    a = a + 4
    local L = resolve(key, ikey, tpl, us, x, ix)
    if not L then
      out[j], ok = enc('<B', A_NOT_FOUND), false
    elseif L.other then
      if TEXT == 1 then out[j] = A_OTHER_KIND .. ' ' .. L.kind else out[j] = enc('<BB', A_OTHER_KIND, #L.kind) .. L.kind end
      ok = false
    else
      local now = floored(L, us, fl, j)
      local E = engine_of(L.kind)
      local rec
      if E.bounds then start(L, now, us) end
      if E.bounds and E.bounds(L, now) then -- a calendar window needs its bounds: the call writes nothing
        out[j], ok, L = enc('<Bi7', A_BOUNDS, us), false, nil
      elseif n < 0 or n > L.max_permits or n ~= floor(n) then
        rec, ok = enc(R, R_PERMITS_RANGE, L.max_permits, 0, 0, 0), false
      else
        if max_wait < 0 then max_wait = HORIZON end
        local D = L
        if n == 0 then -- a check takes nothing; time passes on the limiter as for any
          E.peek(L, now) -- call (a window moves to the window of now: its end is the answer's)
          D = copy_of(L)
        end
        local granted, _, sched, st, delay, _, wait, retry = acquire(D, now, us, n, max_wait)
        rec = decision_rec(L, E.counts, now, granted, sched, st, delay, wait, retry)
        if granted ~= 1 and not optional then ok = false end
        Ls[#Ls + 1] = {L, now, idle_ttl}
      end
      if L then out[j] = answer_head(L, E.counts, us, now) .. SEP .. rec end
    end
  end
  local reply = {table.concat(out, SEP)}
  if not ok or mode == '0' then return reply end
  for _, e in ipairs(Ls) do
    local L, now, idle_ttl = e[1], e[2], e[3]
    local before, pttl = L.x, -1
    if mode == '2' and before and L.inst then pttl = rcall('PTTL', L.key) end
    save(L, now, idle_ttl)
    -- an instance with an idle TTL gets it anew even unchanged: its TTL
    -- is to be restored too
    if mode == '2' and (L.x ~= before or (L.inst and idle_ttl > 0)) then
      local n = #reply
      reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = L.key, before or '', pttl, L.x
    end
  end
  if mode == '2' then reply[#reply + 1] = us end
  return reply
end

return acquire_all(KEYS, ARGV)
