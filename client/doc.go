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
// When Redis does not answer, a handle follows its fallback mode: FallbackSafe
// (a local limit at this process's recent share of the rate), FallbackOptimistic
// (unlimited) or FallbackPessimistic (nothing), and returns to the shared
// schedule by itself once Redis answers again.
//
// Share is a Doorman client of a share limiter: it leases a part of a
// capacity divided among its clients, refreshes the lease in the background,
// and uses it as a local rate (Wait, Allow) or a gauge of operations in flight
// (Acquire); when the lease has expired and Redis is unreachable it follows
// the fallback mode. Semaphore takes slots of a concurrency limiter, a
// distributed semaphore, renewing their leases while they are held.
//
// Middleware and EchoMiddleware limit HTTP requests per key (client IP, API
// key) through limiter templates, answering 429 with Retry-After and the
// RateLimit fields of the IETF draft.
//
// Errors are values to test with errors.Is: limiter.ErrNotFound,
// limiter.ErrInvalid, store.ErrUnavailable, ErrClosed, and the context's
// errors.
package client
