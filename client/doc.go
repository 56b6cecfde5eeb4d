// Package client lets many processes share one limitd schedule without a
// round trip per permit.
//
// A Limiter handle takes grants of many permits from the shared schedule in
// Redis in one script call and dispenses them locally, each at its exact
// scheduled time converted to the local monotonic clock. Grants are sized from
// the caller's own recent demand (about 20 ms of it), and the next grant is
// fetched before the current one runs out, so a steady caller never waits on
// Redis. Unused permits are handed back on Close, and a config change
// published by limitd drops permits taken at the old rate at once.
//
// When Redis does not answer, a handle follows its fallback mode (Fallback)
// and returns to the shared schedule by itself once Redis answers again.
//
// Share is a Doorman client of a share limiter: it leases a part of a
// capacity divided among its clients, refreshes the lease in the background,
// and uses it as a local rate (Wait, Allow) or a gauge of operations in flight
// (Acquire); when the lease has expired and Redis is unreachable it follows
// the fallback mode. Semaphore takes slots of a concurrency limiter, a
// distributed semaphore, renewing their leases while they are held.
//
// AcquireAll takes permits from several limiters in one call, all or
// nothing, over either transport (no local pool: straight from the shared
// schedules).
//
// Charges record usage after the fact, for work whose cost is known only
// once it is done (an LLM answer's tokens): Limiter.Charge takes permits
// whatever is left (a schedule goes into debt, a window counts past its
// limit; a charge of 0 is a check), and a Reservation taken before the work
// (Limiter.Reserve) is settled with what it used (Reservation.Settle: the
// unused part handed back, the excess charged).
//
// Two transports reach the shared schedules: a limitd server over HTTP
// (NewHTTP), or Redis directly (package client/redisclient, whose New takes
// any redis.UniversalClient: store.NewClient builds one from every form of
// LIMITD_REDIS_URL). Redis lives in that package alone, so that a program
// over HTTP compiles neither go-redis nor the Lua scripts. Every answer is
// in the vocabulary of package limitd (Decision, SlotLease, ...), as the
// server's own.
//
// A client over Redis counts what it refuses and adds the counts to the
// Redis totals limitd's dashboard and metrics read (RefusalTally), so that
// they show the refusals no server saw. WithoutRefusalCounts turns it off.
//
// The HTTP middleware that limits requests per key through limiter templates
// is in package httplimit, so that a user of the client alone does not compile
// echo.
//
// Layer: client → limitd → limiter (and internal/clockoffset, the
// Redis-clock offset estimator it shares with limitd bench); client/redisclient
// → client, store. TestClientCompilesNoRedis keeps it so. It uses net/http only as an
// HTTP client, for NewHTTP; it imports no server front end (api, echo), and
// httplimit imports it, never the reverse.
//
// Errors are values to test with errors.Is: limiter.ErrNotFound,
// limiter.ErrInvalid, limiter.ErrUnavailable, ErrClosed, and the context's
// errors. A handle on a limiter that does not exist answers
// limiter.ErrNotFound from AllowNext and Wait (Allow: false) and remembers
// it: it asks Redis again a second later, or at once when a change event
// says the limiter was created, so a missing limiter costs no round trip per
// call.
package client
