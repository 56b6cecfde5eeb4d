package limitd

import (
	"math"
	"time"

	"github.com/limitd/limitd/limiter"
)

// Forever is the max wait of a caller that waits as long as it takes.
const Forever = time.Duration(math.MaxInt64)

// Decision is the outcome of an acquire, a grant or a charge.
type Decision struct {
	Granted    bool
	Permits    int64
	Scheduled  int64 // when the permits were due on the schedule
	Start      int64 // when the caller may start
	Delay      int64 // Start − Now
	Lateness   int64 // Start − Scheduled, or 0 for a start at once ahead of it (burst inf)
	Wait       int64 // the limiter's backlog after the call
	RetryAfter int64 // denied: how much later the same request could be granted
	Version    int64 // the limiter's config version
	Now        int64 // Redis time of the decision
	// Instance: a template instance decided (name is no limiter but matches
	// a template), so callers can label by template without a round trip.
	Instance bool
	// Position is where the schedule stands after the call: the next
	// permit's scheduled start (smooth: its next free time). The store sends
	// the furthest it has seen per name as a floor with its next call.
	Position int64
	// Window: a window limiter answered, with Limit permits per window (0
	// for other kinds, and for a window that refuses every request). For a
	// window, Wait is the permits left (limiter.Result), Position the end of
	// its window, and a grant starts now.
	Window bool
	Limit  int64
	// Charged: the answer to a charge, whose permits were taken whatever
	// Granted (whether they fitted within MaxWait; a window: in its count)
	// says; Delay is how long a new caller would wait now (see
	// limiter.Params.Charge).
	Charged bool
	// Count is a window's count after a charge (0 otherwise).
	Count int64
	// Shadow marks a refusal by a limiter in shadow mode that core reports
	// as granted: it took nothing (the store never sets it).
	Shadow bool
}

// MultiRequest is one limiter's part of an AcquireAll call.
type MultiRequest struct {
	Name    string
	Permits int64 // ≥ 0; 0 checks the limiter (as if for 0 permits) and takes nothing
	// Optional marks a request whose refusal does not refuse the call (a
	// shadow limiter): refused, it takes nothing, and the others are
	// decided as if it had granted.
	Optional bool
}

// MultiDecision is the outcome of AcquireAll.
type MultiDecision struct {
	// Granted: every request granted (or was Optional), and each granted
	// request's permits were taken. False: nothing was taken.
	Granted bool
	// Decisions are each limiter's own, in request order; in a refused call
	// a limiter that granted reports what it would have done.
	Decisions []Decision
	// Unrestored counts, on a cluster, the limiters of a refused call that
	// another caller used between the call's take and its undo, which kept
	// the permits the call took; 0 on one server.
	Unrestored int
}

// Grant is k permits taken from the shared schedule in one call, for a client
// pool to dispense locally, with what the pool needs to place each permit and
// to hand unused ones back.
type Grant struct {
	Decision
	Name      string
	Kind      limiter.Kind
	Slice     limiter.Slice
	Burst     float64 // +Inf for "inf"
	RemBefore int64   // the carry before the grant
	End       int64   // the schedule pointer after the grant (Unix ns): the Position
	// MaxPermits is the most permits one grant may take (its max_reserve).
	MaxPermits int64
	origin     GrantOrigin
}

// GrantOrigin is what of a grant only the store makes: the epoch (µs) its
// times are exact in, and the nonce that tells it from every other grant. A
// front end that sends grants over a wire restores it (SetOrigin) before the
// grant is handed back, so that no process keeps the grants it issued.
type GrantOrigin struct {
	Epoch int64
	Nonce uint64
}

// Origin returns g's origin.
func (g *Grant) Origin() GrantOrigin { return g.origin }

// SetOrigin sets the origin of a grant the store made, or restores that of
// a grant rebuilt from its wire form. With the wrong epoch, a hand-back
// rewinds nothing (it counts the permits as idle); with the wrong nonce, the
// grant can be handed back once more, which rewinds only if nothing moved.
func (g *Grant) SetOrigin(o GrantOrigin) { g.origin = o }

// Params returns engine parameters able to compute costs and pace for the
// grant's permits (Slice, Burst, Kind).
func (g *Grant) Params() limiter.Params {
	return limiter.Params{Kind: g.Kind, Slice: g.Slice, Burst: g.Burst}
}

// Info is a limiter as stored: its canonical config and version.
type Info struct {
	Name     string
	Config   limiter.Config
	Version  int64
	Template string // the template a template instance follows; "" for a named limiter
	// Changed: a put or a patch changed the limiter, whose version went up
	// by one (from 0 when created); false for a config equal to the current.
	Changed bool
}

// WaitInfo is a limiter's live state: what GET /v1/limiters/{name}/wait returns.
type WaitInfo struct {
	Wait      int64 // backlog: schedule time nobody claimed (smooth: stored time), ns
	Delay     int64 // how long a new caller would wait now, ns
	Idle      int64 // total time forfeited, ns
	Allocated int64 // total time granted, ns
	Permits   int64 // total permits granted
	Lateness  int64 // total lateness of granted requests, ns
	Now       int64 // Redis time
	Version   int64
	Started   bool
	Instance  bool  // a template instance answered (see Decision.Instance)
	Position  int64 // a started limiter's position (see Decision.Position)
	// Window and Limit as in Decision: for a window, Wait is the permits
	// left, Delay the time until one is, Position the end of the window.
	Window bool
	Limit  int64
}

// SlotLease is the answer to a concurrency limiter's acquire and renewal.
type SlotLease struct {
	Granted    bool
	ID         string // lease id (16 random bytes in hex), set when granted
	Expires    int64
	RetryAfter int64 // when not granted: until the earliest lease expires
	InUse      int64
	Limit      int64
	// Readded: a renewal found the lease gone (expired, or lost by Redis)
	// and registered it again, a slot being free.
	Readded bool
	// Shadow as in Decision: no slot was taken and there is no lease (ID "").
	Shadow bool
}

// CapacityRequest is a client's request for a share of a limiter's capacity.
type CapacityRequest struct {
	ClientID string  // NameRule; the same in every request of the client
	Wants    float64 // ≥ 0, finite
	Has      float64 // ≥ 0, finite: what the client holds now
	Priority float64 // ≥ 0, finite, ≤ MaxPriority; the weight of its claim (0 counts as 1)
}

// MaxPriority is the largest priority (weight) of a capacity request.
const MaxPriority = 1e6

// Check checks r's fields; its error is a *limiter.FieldError naming the
// field (client_id, wants, has, priority).
func (r CapacityRequest) Check() error {
	if err := CheckNameAs("client_id", r.ClientID); err != nil {
		return err
	}
	for _, f := range []struct {
		field string
		v     float64
	}{{"wants", r.Wants}, {"has", r.Has}, {"priority", r.Priority}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return &limiter.FieldError{Field: f.field, Rule: "must be ≥ 0 and finite", Value: f.v}
		}
	}
	if r.Priority > MaxPriority {
		return &limiter.FieldError{Field: "priority", Rule: "must be ≥ 0 and ≤ 1e6", Value: r.Priority}
	}
	return nil
}

// CapacityLease is what a client gets: Gets of the capacity until Expires. It
// should ask again after Refresh, and use SafeCapacity when it cannot ask.
type CapacityLease struct {
	Gets         float64
	Expires      int64
	Refresh      int64
	SafeCapacity float64
	Learning     bool
	Version      int64
}

// Holders is what the holders of a lease limiter (share or concurrency) hold
// now: the leases that have not expired at Now (Redis time, read in the same
// transaction), as lua/share.lua and lua/concurrency.lua count them.
type Holders struct {
	Kind    limiter.Kind
	Version int64 // the limiter's config version
	Now     int64
	// Share: every client's lease, in client id order; Held is their sum;
	// Learning: in learning mode (see limiter.ShareParams).
	Share    []ShareHolder
	Held     float64
	Learning bool
	// Concurrency: the leased slots, earliest expiry first.
	Slots []SlotHolder
}

// ShareHolder is one client's capacity lease on a share limiter.
type ShareHolder struct {
	ClientID string
	Has      float64 // what the limiter granted it
	Wants    float64
	Priority float64
	Expires  int64
}

// SlotHolder is one leased slot of a concurrency limiter.
type SlotHolder struct {
	LeaseID string
	Expires int64
}

// Subject is what a decision counts under: a named limiter, or a template
// and the instance that decided (Instance "" when not known: the decision
// counts in the template's totals only).
type Subject struct {
	Limiter  string
	Template string
	Instance string
}

// Counts are decisions counted: calls and their permits, granted and refused.
type Counts struct {
	GrantedCalls   int64
	GrantedPermits int64
	RefusedCalls   int64
	RefusedPermits int64
}

// IsZero reports whether c counts nothing.
func (c Counts) IsZero() bool { return c == Counts{} }

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.GrantedCalls += o.GrantedCalls
	c.GrantedPermits += o.GrantedPermits
	c.RefusedCalls += o.RefusedCalls
	c.RefusedPermits += o.RefusedPermits
}

// TopInstance is one of a template's busiest instances: the permits refused
// and granted it was counted over the minutes asked for.
type TopInstance struct {
	Name             string
	Refused, Granted int64
}
