package core

import (
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// The service's own words for what its operations answer. Each mirrors what
// the store keeps, field for field where it can, so that the store's is
// converted at the one place core receives it (a struct conversion: a field
// the store adds and core does not know is a compile error there, not a
// silent loss); none carries a wire format's names.

// Decision is a rate decision: an acquire's, a grant's or a charge's. Time
// points are Unix ns on the Redis clock, durations ns.
type Decision struct {
	Granted    bool
	Permits    int64
	Scheduled  int64 // when the permits were due on the schedule
	Start      int64 // when the caller may start
	Delay      int64 // Start − Now
	Lateness   int64 // Start − Scheduled
	Wait       int64 // the limiter's backlog after the call (a window: the permits left)
	RetryAfter int64 // denied: how much later the same request could be granted
	Version    int64 // the limiter's config version
	Now        int64 // Redis time of the decision
	// Instance: a template instance answered (the name matched a template).
	Instance bool
	// Position is where the limiter's schedule stands after the call (a
	// window: the end of its window).
	Position int64
	// Window: a window limiter answered; Limit is its permits per window.
	Window bool
	Limit  int64
	// Charged: the permits were taken whatever Granted says (a charge);
	// Count is then a window's count after it.
	Charged bool
	Count   int64
	// Shadow: a refusal of a limiter in shadow mode, reported as granted.
	Shadow bool
}

func decisionOf(d store.Decision) Decision { return Decision(d) }

// Info is a limiter as stored: its canonical config and version.
type Info struct {
	Name    string
	Config  limiter.Config
	Version int64
	// Template is the id of the template a template instance follows; empty
	// for a named limiter.
	Template string
	// Changed: the call (Put, Patch) changed the limiter, whose version went
	// up by one; false for a config equal to the current one.
	Changed bool
}

func infoOf(i store.Info) Info { return Info(i) }

// WaitInfo is a limiter's live state at Now.
type WaitInfo struct {
	Wait      int64 // backlog: schedule time nobody claimed (smooth: stored time; a window: the permits left)
	Delay     int64 // how long a new caller would wait now
	Idle      int64 // total time forfeited
	Allocated int64 // total time granted
	Permits   int64 // total permits granted
	Lateness  int64 // total lateness of granted requests
	Now       int64 // Redis time, Unix ns
	Version   int64
	Started   bool
	Instance  bool  // a template instance answered
	Position  int64 // a started limiter's position (a window: the end of its window)
	// Window: a window limiter; Limit its permits per window.
	Window bool
	Limit  int64
}

func waitInfoOf(w store.WaitInfo) WaitInfo { return WaitInfo(w) }

// SlotLease is a concurrency slot, or the answer that none is free.
type SlotLease struct {
	Granted    bool
	ID         string // the lease id, when granted
	Expires    int64  // Unix ns, Redis clock
	RetryAfter int64  // when not granted: until the earliest lease expires
	InUse      int64
	Limit      int64
	// Readded: a renewal found the lease gone and registered it again, a
	// slot being free.
	Readded bool
	// Shadow: a refusal in shadow mode let through, without a lease.
	Shadow bool
}

func slotLeaseOf(l store.SlotLease) SlotLease { return SlotLease(l) }

// CapacityLease is a share client's lease.
type CapacityLease struct {
	Gets         float64
	Expires      int64 // Unix ns, Redis clock
	Refresh      int64 // ns
	SafeCapacity float64
	Learning     bool
	Version      int64
}

func capacityLeaseOf(l store.CapacityLease) CapacityLease { return CapacityLease(l) }

// Template makes limiters on demand: a name matching Pattern (and no
// limiter) is an instance with the Limiter config.
type Template struct {
	ID      string
	Pattern string
	Order   int
	IdleTTL *limiter.Duration // nil: the default
	Limiter limiter.Config
	Version int64
	// Description is what displays call the template instead of its id
	// (an Envoy rule's descriptors: "mongo_cps.database_users"); "": the
	// id.
	Description string
}

func templateOf(t store.Template) Template { return Template(t) }

func (t Template) stored() store.Template { return store.Template(t) }

func templatesOf(ts []store.Template) []Template {
	out := make([]Template, len(ts))
	for i, t := range ts {
		out[i] = templateOf(t)
	}
	return out
}

// Holders are a share or concurrency limiter's leases at Now.
type Holders struct {
	Kind    limiter.Kind
	Version int64 // the limiter's config version
	Now     int64 // Redis time, Unix ns
	// Share: every client's lease, in client id order; Held is the sum of
	// what they have; Learning while the limiter is in learning mode.
	Share    []ShareHolder
	Held     float64
	Learning bool
	// Concurrency: the leased slots, earliest expiry first.
	Slots []SlotHolder
}

// ShareHolder is one share client's lease.
type ShareHolder struct {
	ClientID string
	Has      float64
	Wants    float64
	Priority float64
	Expires  int64 // Unix ns
}

// SlotHolder is one leased concurrency slot.
type SlotHolder struct {
	LeaseID string
	Expires int64 // Unix ns
}

func holdersOf(h *store.Holders) *Holders {
	if h == nil {
		return nil
	}
	out := &Holders{Kind: h.Kind, Version: h.Version, Now: h.Now, Held: h.Held, Learning: h.Learning}
	for _, s := range h.Share {
		out.Share = append(out.Share, ShareHolder(s))
	}
	for _, s := range h.Slots {
		out.Slots = append(out.Slots, SlotHolder(s))
	}
	return out
}

// Normalize checks t and returns it with its config in canonical form, as
// PutTemplate would keep it. Its errors are *limiter.FieldError naming the
// template's field (limiter.rate, pattern, ...).
func (t Template) Normalize() (Template, error) {
	n, err := t.stored().Normalize()
	return templateOf(n), err
}
