// Package client lets many processes share one limitd schedule without a
// round trip per permit.
//
// A Limiter handle takes grants of many permits from the shared schedule in
// Redis in one script call and dispenses them locally, each at its exact
// scheduled time converted to the local monotonic clock. Grants are sized from
// the caller's own recent demand (about 20 ms of it), and the next grant is
// fetched before the current one runs out, so a steady caller never waits on
// Redis. Unused permits are handed back on Close, and a config change
// published by limitd drops permits taken at the old rate at once. When Redis
// does not answer, a handle follows its fallback mode (Fallback).
//
// Share leases a part of a share limiter's capacity (Doorman); Semaphore
// takes slots of a concurrency limiter; AcquireAll takes permits from several
// limiters at once, all or nothing; Limiter.Charge and Reservation.Settle
// record usage after the fact, for work whose cost is known only once done.
//
// Two transports reach the shared schedules: a limitd server over HTTP
// (NewHTTP), or Redis directly (package client/redisclient), which alone
// imports go-redis and the Lua scripts. Every answer is in the vocabulary of
// package limitd (Decision, SlotLease, ...), as the server's own. A client
// over Redis adds what it refuses to the Redis totals limitd's dashboard
// and metrics read (RefusalTally). The HTTP middleware is in package
// httplimit, so that a user of the client alone does not compile echo.
//
// Layer: client → limitd → limiter (and internal/clockoffset, the
// Redis-clock offset estimator it shares with limitd bench); client/redisclient
// → client, store. TestClientCompilesNoRedis keeps it so. It uses net/http only
// as an HTTP client, for NewHTTP, and imports no server front end.
//
// Errors are values to test with errors.Is: limiter.ErrNotFound,
// limiter.ErrInvalid, limiter.ErrUnavailable, ErrClosed, and the context's
// errors. A handle remembers a limiter that does not exist for a second
// (missingFor), so a missing limiter costs no round trip per call.
package client
