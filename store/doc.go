// Package store keeps limitd's shared limiters in Redis.
//
// A Store wraps any redis.UniversalClient (single node, sentinel or cluster).
// Each limiter is a Redis hash, prefix:{name}:l, holding its config and
// version, and a state key, prefix:{name}:x, holding x, one packed value with
// its engine parameters, live state and totals; a template instance is its x
// alone, a string key with a TTL, prefix:{name}:i. The hash tag keeps every
// key of one limiter in one cluster slot. The Lua scripts of package lua make
// every decision atomically, read the only clock (Redis TIME) and agree with
// package limiter to the nanosecond. On Redis ≥ 7 the rate limiter's calls
// run as Redis Functions of one library (functions.go); elsewhere, and for
// every other operation, as scripts (EVALSHA).
//
// Charges (acquire.go) take permits whatever is left: usage recorded after
// the fact. AcquireMany decides many acquires in one round trip per node, one
// script call per limiter (on a single server, one call for many limiters);
// WithBatching does this for concurrent callers of Acquire (batcher.go).
// AcquireWithin bounds a caller's wait for Redis without a timer of its own.
// AcquireAll takes permits from several limiters all or nothing
// (acquire_all.go).
//
// Configs live in Redis: Put creates, replaces or reconfigures a limiter in one
// script (never half-written), bumping its version and publishing the change on
// prefix:changes. Templates map glob patterns to configs; a name that is not a
// limiter but matches a template gets its own state, with a TTL, on first use.
// Decision totals live beside what they count (totals.go).
//
// Window limiters answer their limit (Decision.Limit, WaitInfo.Limit); their
// Wait is the permits left and their Position the end of the window. A
// calendar window gets its boundaries from the store, computed in Go
// (bounds.go).
//
// Reliability (docs/reliability.md): a Store sends the furthest schedule
// position it has seen per name as a floor with its next call (floors.go),
// so that a state that comes back older after a failover, or empty, does not
// grant again what it granted. A grant is handed back once (Release).
//
// Errors are values to test with errors.Is: limiter.ErrNotFound,
// limiter.ErrInvalid (with a *limiter.FieldError naming the field),
// ErrUnavailable (Redis cannot serve; an *UnavailableError names the
// condition) and ErrConflict. Ready tells whether every master accepts a
// write.
package store
