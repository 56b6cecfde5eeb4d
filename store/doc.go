// Package store keeps limitd's shared limiters in Redis.
//
// A Store wraps any redis.UniversalClient (single node, sentinel or cluster).
// Each limiter is one Redis hash, prefix:{name}:l, holding its config, its
// engine parameters, its version and its live state; the hash tag keeps every
// key of one limiter in one cluster slot. The Lua scripts of package lua make
// every decision atomically, read the only clock (Redis TIME) and agree with
// package limiter to the nanosecond. On Redis ≥ 7 the rate limiter's calls
// (acquire, grant, peek, release, reset) run as Redis Functions of one
// library, loaded on first use (functions.go); elsewhere, and for every other
// operation, as scripts (EVALSHA).
//
// Configs live in Redis: Put creates, replaces or reconfigures a limiter in one
// script (never half-written), bumping its version and publishing the change on
// prefix:changes. Templates map glob patterns to configs; a name that is not a
// limiter but matches a template gets its own state, with a TTL, on first use.
//
// Errors are values to test with errors.Is: limiter.ErrNotFound,
// limiter.ErrInvalid (with a *limiter.FieldError naming the field),
// ErrUnavailable (Redis did not answer) and ErrConflict (a kind change by
// Patch).
package store
