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
// Two engines exist:
//
//   - schedule: a strict or bursting schedule of permits. Each permit is allocated
//     one slice (1e9/rate ns) of the schedule. A caller that falls behind may catch
//     up at burst×rate until the backlog is gone; burst 1 is strict, burst "inf"
//     catches up at once. The backlog ("wait time") is how far behind schedule the
//     limiter's callers are.
//   - smooth: Guava's SmoothBursty and SmoothWarmingUp, in nanoseconds. Unused time
//     is stored as permits (up to max_burst_seconds of them, or a warm-up
//     trapezoid) that later callers may spend at once.
//
// Precision. A slice is an exact rational (see [Slice]) and every cost carries its
// sub-nanosecond remainder, so scheduled times do not drift however many permits
// are granted. All times a limiter keeps stay within [Horizon] of the current
// time; that bounds every value the Lua scripts hold to well under 2^53 and keeps
// their double arithmetic exact.
//
// Most Go callers want [New] and [Limiter.Wait] or [Limiter.Allow].
package limiter
