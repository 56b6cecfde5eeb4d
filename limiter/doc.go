// Package limiter is limitd's reference model: rate specs, limiter configs, the
// engines that decide when a permit may start, and a goroutine-safe in-process
// limiter built on them.
//
// An engine is a pure state machine. [Params] are the compiled, immutable
// parameters of one limiter; [State] is a plain value holding everything that
// changes; every operation takes the current time as an explicit argument in
// nanoseconds. Nothing here reads a clock, sleeps or imports Redis or HTTP, so the
// Lua scripts that keep shared limiters in Redis can be checked against this
// package call for call, to the nanosecond.
//
// Kinds are listed once, in the table of kinds.go ([KindInfo]: name, class
// rate or lease, packed-state code, config fields, compile, engine); every
// layer asks it ([Lookup], [IsRate]). docs/kinds.md says how to add one.
//
// Three engines exist:
//
//   - schedule: a strict or bursting schedule of permits. Each permit is allocated
//     one slice (1e9/rate ns) of the schedule. A caller that falls behind may catch
//     up at burst×rate until the backlog is gone; burst 1 is strict, burst "inf"
//     catches up at once. The backlog ("wait time") is how far behind schedule the
//     limiter's callers are.
//   - smooth: Guava's SmoothBursty and SmoothWarmingUp, in nanoseconds. Unused time
//     is stored as permits (up to max_burst_seconds of them, or a warm-up
//     trapezoid) that later callers may spend at once.
//   - window: at most Limit permits per period, granted now or not at all, in
//     fixed, sliding or calendar windows (window.go).
//
// Precision. A slice is an exact rational (see [Slice]) and every cost carries its
// sub-nanosecond remainder, so scheduled times do not drift however many permits
// are granted. All times a limiter keeps stay within [Horizon] of the current
// time; that bounds every value the Lua scripts hold to well under 2^53 and keeps
// their double arithmetic exact.
//
// Bounds. One request may take at most max_reserve of schedule (default
// [DefaultMaxReserve], 1m; never less than one permit): Params.MaxPermits.
//
// Charges (charge.go, [Params.Charge]): usage recorded after the fact, taken
// whatever is left and never refused for lack of permits.
//
// Clocks and floors (floor.go). The engines take now as an argument, and a
// shared limiter's now is Redis TIME, which can jump:
//
//   - A step forward looks like idle time: a schedule limiter's backlog grows
//     (up to max_backlog; beyond it, time is forfeited as idle) and its
//     callers may catch up at burst×rate; a smooth limiter stores permits up to
//     its burst (or warms down). Exactly what the same wait would do.
//   - A step back (now earlier than the time of the state's last grant, reset
//     or reconfiguration, [State.Last]) moves the state back by the step
//     ([State.Observe]): the schedule continues from where it stood, on the
//     new clock. Nobody waits out the step and nothing beyond the rate is
//     granted. A step smaller than the time since the last grant is not seen
//     as one: time stands still for that long, which costs a caller at most the
//     wait the last grant gave it.
//   - A [Floor] (the furthest schedule position a caller was told, with the
//     time of that answer) keeps a state that came back older, or fresh, from
//     starting the schedule before it ([Params.ApplyFloor]). A floor seen at a
//     time later than now (the clock stepped back since) is re-anchored at
//     now: it keeps the schedule as far ahead of now as the caller was told
//     (Ahead), so it never holds callers back for the length of the step. In
//     real time a re-anchored floor lies no earlier than the position the
//     caller was told (it is later by the time since it was seen), so a step
//     back and a lost state together still grant nothing twice; and in every
//     case a floor makes a caller wait at most the Ahead it was told of.
//
// Most Go callers want [New] and [Limiter.Wait] or [Limiter.Allow].
package limiter
