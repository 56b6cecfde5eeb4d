// Package store keeps limitd's shared limiters in Redis.
//
// A Store wraps any redis.UniversalClient (single node, sentinel or cluster).
// Each limiter is a Redis hash, prefix:{name}:l, holding its config and
// version, and a state key, prefix:{name}:x, holding x, one packed value with
// its engine parameters, live state and totals; a template instance is its x
// alone, a string key with a TTL, prefix:{name}:i. The hash tag keeps every
// key of one limiter in one cluster slot. A decision reads and writes one
// value, and a batch reads all of its limiters with one MGET. The Lua scripts of package lua make
// every decision atomically, read the only clock (Redis TIME) and agree with
// package limiter to the nanosecond. On Redis ≥ 7 the rate limiter's calls
// (acquire, grant, peek, release, reset) run as Redis Functions of one
// library, loaded on first use (functions.go); elsewhere, and for every other
// operation, as scripts (EVALSHA).
//
// Charges (charge.go): Charge takes permits whatever is left, usage recorded
// after the fact; a Request with Charge does the same in a batch, beside
// acquires.
//
// Batching: AcquireMany decides many acquires in one round trip per node.
// One script call decides all the requests of one limiter, reading and writing
// it once at one Redis time, and on a single Redis server one call takes the
// requests of many limiters. WithBatching does this for concurrent callers of
// Acquire automatically (batcher.go): a call that arrives while others are in
// flight goes out within a short linger on a connection of its own, so that it
// costs one round trip, and a round trip that comes back makes the next batch
// wait (1 ms at most) for the callers it answered, so that batches stay large
// when Redis is busy.
// AcquireWithin bounds a caller's wait for Redis, however many callers there
// are, without a timer of its own, as a server bounds every decision.
//
// Several limits in one call: AcquireAll takes permits from several limiters
// all or nothing (acquire_all.go says exactly how atomic that is on one
// server and across cluster slots).
//
// Configs live in Redis: Put creates, replaces or reconfigures a limiter in one
// script (never half-written), bumping its version and publishing the change on
// prefix:changes. Templates map glob patterns to configs; a name that is not a
// limiter but matches a template gets its own state, with a TTL, on first use.
// A template's versions count per id (a hash, prefix:templates:versions).
//
// Decision totals (totals.go) live beside what they count: prefix:{name}:t
// for a limiter or instance, prefix:{id}:tt for a template, and per-minute
// sorted sets prefix:{id}:top:r|g:MINUTE of a template's busiest instances;
// each expires, and every command that writes them names one key.
//
// Window limiters. A window's answers carry its limit (Decision.Limit,
// WaitInfo.Limit); its Wait is then the permits left and its Position the end
// of its window. A calendar window (day, week, month, year in a zone) gets
// its boundaries from the store, computed in Go, when a call finds its window
// ended (bounds.go): one more round trip per window and limiter.
//
// Reliability. Every answer carries the schedule's position, and a Store
// remembers the furthest it has seen per name and sends it as a floor with its
// next acquire or grant (floors.go): a state that comes back older after a
// failover (replication is asynchronous) or empty after a restart without
// persistence does not grant again what it granted. Redis time stepping back
// moves the limiter's epoch rather than stalling it (lua/lib.lua, "Clock
// steps"). A grant is handed back once (Release). One request takes at most
// the limiter's max_reserve of schedule (default 1m). Template instances
// expire DefaultIdleTTL after their debt is paid unless the template says
// otherwise.
//
// Errors are values to test with errors.Is: limiter.ErrNotFound,
// limiter.ErrInvalid (with a *limiter.FieldError naming the field),
// ErrUnavailable (Redis cannot serve: down, hung, a read-only replica, out of
// memory, loading, a cluster shard down; an *UnavailableError names the
// condition) and ErrConflict (a kind change by Patch). Ready tells whether
// every master accepts a write, within ReadyTimeout.
package store
