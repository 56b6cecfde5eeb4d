// Package limitd is the vocabulary every layer of limitd speaks: what a
// limiter answers (Decision, Grant, WaitInfo, SlotLease, CapacityLease,
// Holders), what is kept of it (Info, Template), what decisions count
// under (Subject, Counts), and the rules of names and templates
// (CheckName, CheckLeaseID, Template.Normalize).
//
// The store returns these types, core answers them, and the Go client
// hands them to its callers: none of them converts one into another, and a
// user of the client over HTTP compiles no Redis. Nothing here reads a
// clock or talks to Redis or HTTP. The configs and engines are package
// limiter's, and so are the errors callers branch on (limiter.ErrNotFound,
// ErrConflict, ErrUnavailable, ErrInvalid); bad input is a
// *limiter.FieldError naming the field and its rule.
//
// Time points are Unix ns on the Redis clock, durations ns.
package limitd
