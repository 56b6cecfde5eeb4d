package core

import "time"

// Op names a store call in Observer.StoreCall.
type Op int

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

const (
	// EventRate: a rate decision (acquire, grant or charge of permits);
	// outcome "granted", "denied", "shadow" (a refusal let through in
	// shadow mode), "voided" (would have granted in an AcquireAll another
	// limiter refused) or "charged".
	EventRate EventKind = iota
	// EventCapacity: a share limiter's capacity decision; outcome "full",
	// "partial", "none" or "learning".
	EventCapacity
	EventSlot  // a slot acquisition: "granted", "denied" or "shadow" (no lease)
	EventLease // a lease "renewed", "released" or "lost" (no longer held)
)

// Event is one decision. It names the limiter, or for a template instance
// the template's id with Limiter empty; both are empty when the subject
// could not be told.
type Event struct {
	Kind     EventKind
	Limiter  string
	Template string
	// Instance is a template instance's name, beside Template. An observer
	// that labels series must not use it: instances are unbounded; only one
	// that bounds what it keeps (the Ledger) may.
	Instance string
	Outcome  string
	// A rate decision's permits, and for a grant how long its caller waits
	// and how late it starts against the schedule.
	Permits         int64
	Delay, Lateness time.Duration
}

// Observer sees what the service does. Its methods are called on the
// request's goroutine, after the fact; they must be fast and not block.
type Observer interface {
	// StoreCall reports one store call and how long it took, failed ones
	// included.
	StoreCall(op Op, took time.Duration)
	Decided(e Event)
}
