package core

import "time"

// Op names a store call in Observer.StoreCall.
type Op int

// The store calls.
const (
	OpPing Op = iota
	OpPut
	OpGet
	OpPatch
	OpDelete
	OpList
	OpAcquire
	OpWait
	OpReset
	OpPutTemplate
	OpGetTemplate
	OpDeleteTemplate
	OpTemplates
	OpCapacity
	OpReturnCapacity
	OpAcquireSlot
	OpRenewSlot
	OpReleaseSlot
	OpGrant
	OpHandback
	OpHolders
	OpInstances
	OpAcquireAll
	OpWaitMany
	OpCharge
	OpCount
	OpLost
	OpMark
	OpTotals
	OpTop
	OpInstanceTTL
	NumOps // the number of Ops
)

var opNames = [NumOps]string{"ping", "put", "get", "patch", "delete", "list", "acquire", "wait",
	"reset", "put_template", "get_template", "delete_template", "templates",
	"capacity", "return_capacity", "acquire_slot", "renew_slot", "release_slot", "grant", "handback", "holders", "instances", "acquire_all", "wait_many",
	"charge", "count", "lost", "mark", "totals", "top", "instance_ttl"}

// String is the op's name, as metrics label it ("acquire_slot").
func (o Op) String() string {
	if o < 0 || o >= NumOps {
		return "unknown"
	}
	return opNames[o]
}

// EventKind says what an Event decided.
type EventKind int

// The kinds of events and their outcomes.
const (
	// EventRate: a rate decision (acquire, grant or charge of permits);
	// outcome "granted", "denied", "shadow" (a refusal in shadow mode, let
	// through: nothing taken), "voided" (a limiter of an AcquireAll call
	// another limiter refused: it would have granted, nothing taken) or
	// "charged" (permits taken by a charge whatever was left; a check, 0).
	EventRate EventKind = iota
	// EventCapacity: a share limiter's capacity decision; outcome "full"
	// (got all it wants), "partial", "none" or "learning".
	EventCapacity
	// EventSlot: a concurrency slot acquisition; "granted", "denied" or
	// "shadow" (refused and let through in shadow mode: no lease).
	EventSlot
	// EventLease: a concurrency lease "renewed", "released" or "lost" (a
	// renewal or release of a lease the limiter no longer holds).
	EventLease
)

// Event is one decision. It names the limiter, or for a template instance
// the template's id with Limiter empty. Both are empty when the subject
// could not be told.
type Event struct {
	Kind     EventKind
	Limiter  string
	Template string
	// Instance is a template instance's name (user:42), beside Template. An
	// observer that labels series (metrics) must not use it: per-key
	// limiters are unbounded. Only what bounds its memory by itself may
	// keep it (the Ledger caps the names it counts).
	Instance string
	Outcome  string
	// A rate decision's: the permits asked for (granted, denied or
	// charged), and for
	// a grant how long its caller waits (Delay) and how late it starts
	// against the schedule (Lateness).
	Permits         int64
	Delay, Lateness time.Duration
}

// Observer sees what the service does: metrics, logs and event streams
// implement it. Its methods are called on the request's goroutine, after
// the fact; they must be fast and must not block.
type Observer interface {
	// StoreCall reports one store call (one Redis round trip, more for a
	// list or a view) and how long it took, failed ones included.
	StoreCall(op Op, took time.Duration)
	// Decided reports a decision.
	Decided(e Event)
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) StoreCall(Op, time.Duration) {}
func (nopObserver) Decided(Event)               {}
