// Package core is limitd's service: every operation the front ends offer
// (limiters, acquire, grant and handback, charges and settles, wait and
// reset, share capacity, concurrency slots, templates), over a backend (a
// store.Store; a fake in the tests of its rules), with typed requests and
// errors and no transport of its own. What it answers is the store's own
// answer, in the vocabulary every layer speaks (package limitd: Decision,
// Info, WaitInfo, Template, ...), converted nowhere.
//
// The rules live here, once: kind dispatch of acquire (rate kinds take
// permits, a concurrency limiter a slot, a share limiter is a conflict),
// several limits in one call (AcquireAll, all or nothing, results in
// request order: what the HTTP API's POST /v1/acquire calls), metered
// calls (Count: a rate limit service's descriptors, counted as the Envoy
// reference server counts them or all or nothing, with quota mode),
// shadow mode (shadow.go: a refusal let
// through, applied here once for every front end), blocking acquires, slot
// hints, the checks of every input, stateless handback (a grant's token
// carries what its handback needs, so any replica accepts it), and the
// sampling an event stream repeats (Sampler: one read per limiter and
// sample), and what a configuration keeper needs (Lost: which limiters and
// templates Redis lost; Mark: the configuration last applied). Each decision is reported to an Observer, and each
// store call too, timed in one place (store.go), so that metrics and logs
// need no hooks in the front ends' handlers.
//
// The operator view: a Ledger (an Observer beside the others) counts
// decisions in bounded memory and adds them to Redis each second, so that
// every view of a limiter or template instance has the Totals of every
// process on the Redis, and Top answers a template's busiest instances;
// CachedInstances counts a template's instances for a list.
//
// Errors are values callers branch on: ErrNotFound, ErrConflict,
// ErrUnavailable (a closed store too), *limiter.FieldError (bad input,
// naming the field; matches ErrInvalid) and *NotHeldError (a lease or client
// the limiter does not hold: not found, naming the field). Mapping them to a
// protocol (problem details, gRPC codes) is the front end's business.
//
// Layer: cmd → api|grpcapi → core → store → limitd → limiter. core imports
// store, limitd and limiter, never a front end, a wire format nor a transport.
package core
