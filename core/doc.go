// Package core is limitd's service: every operation the front ends offer
// (limiters, acquire, grant and handback, charges and settles, wait and
// reset, share capacity, concurrency slots, templates), over a backend (a
// store.Store; a fake in the tests of its rules), with typed requests and
// errors and no transport of its own. Its answers are the store's, in the
// vocabulary every layer speaks (package limitd), converted nowhere.
//
// The rules live here, once: kind dispatch of acquire, several limits in one
// call (AcquireAll), metered calls (Count), shadow mode (shadow.go),
// blocking acquires, the checks of every input, stateless handback (a
// grant's token carries what its handback needs, so any replica accepts
// it), sampling (Sampler, Watcher) and what a configuration keeper needs
// (Lost, Mark). Each decision and each store call (timed in store.go) is
// reported to an Observer, so front ends need no hooks. A Ledger counts
// decisions into Redis totals, so that every view has the Totals of every
// process on the Redis.
//
// Errors are values callers branch on: ErrNotFound, ErrConflict,
// ErrUnavailable (a closed store too), *limiter.FieldError (bad input,
// naming the field; matches ErrInvalid) and *NotHeldError (a lease or client
// the limiter does not hold). Mapping them to a protocol is the front end's
// business.
//
// Layer: cmd → api|grpcapi → core → store → limitd → limiter. core imports
// store, limitd and limiter, never a front end, a wire format nor a transport.
package core
