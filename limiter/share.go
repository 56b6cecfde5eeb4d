package limiter

import (
	"cmp"
	"maps"
	"slices"
)

// The share engine (Doorman): a capacity — requests per second, or operations
// in flight — divided among clients by lease. A client asks with what it wants
// and what it has; the algorithm runs for that client alone and never hands
// out more than is unassigned, so the sum of what clients have never exceeds
// the capacity (unless the capacity itself is lowered, and then only until
// the leases are refreshed).

// Algorithm names a capacity algorithm.
type Algorithm string

const (
	AlgorithmNone         Algorithm = "none"               // everyone gets what they want: no limit
	AlgorithmStatic       Algorithm = "static"             // everyone gets up to the safe capacity
	AlgorithmProportional Algorithm = "proportional_share" // equal share, plus a top-up proportional to need
	AlgorithmFair         Algorithm = "fair_share"         // equal share, leftovers divided equally, iteratively
)

// Holding is one client's lease as the share engine keeps it.
type Holding struct {
	Wants   float64
	Has     float64
	Weight  float64 // a client's claim counts Weight equal shares (Doorman's subclients)
	Expires int64
}

// Holdings is a share limiter's state: the unexpired leases by client id.
type Holdings map[string]Holding

// ShareRequest is one client's request for capacity.
type ShareRequest struct {
	Client string
	Wants  float64
	Weight float64 // ≥ 1 (the priority); 0 counts as 1
}

// AlgorithmFunc computes what the requesting client gets, before the cap at
// what is unassigned. others are the other clients' unexpired holdings.
type AlgorithmFunc func(capacity float64, others Holdings, r ShareRequest) float64

// algorithms maps each algorithm to its function. Unexported: lua/share.lua
// knows these and no others, so a caller may not add one.
var algorithms = map[Algorithm]AlgorithmFunc{
	AlgorithmNone:         none,
	AlgorithmStatic:       static,
	AlgorithmProportional: ProportionalShare,
	AlgorithmFair:         FairShare,
}

func none(_ float64, _ Holdings, r ShareRequest) float64 { return r.Wants }

// static gives every client up to an equal share of the capacity; the safe
// capacity, when configured, replaces the equal share (ShareParams.Request).
func static(capacity float64, others Holdings, r ShareRequest) float64 {
	return min(r.Wants, capacity*weight(r.Weight)/(sumWeights(others)+weight(r.Weight)))
}

func weight(w float64) float64 { return max(w, 1) }

// sumOf adds f of every holding in client id order, as each visits them, so
// that sums are reproducible to the last bit (and equal to lua/share.lua's).
func sumOf(h Holdings, f func(Holding) float64) float64 {
	var s float64
	for _, id := range slices.Sorted(maps.Keys(h)) {
		s += f(h[id])
	}
	return s
}

func sumWeights(h Holdings) float64 {
	return sumOf(h, func(c Holding) float64 { return weight(c.Weight) })
}
func sumWants(h Holdings) float64 { return sumOf(h, func(c Holding) float64 { return c.Wants }) }

// ProportionalShare gives each client what it wants, except when the clients
// together want more than the capacity: then each gets its equal share (if it
// wants that much), plus a share of what clients wanting less than their equal
// share leave, proportional to how much more than its equal share it wants.
func ProportionalShare(capacity float64, others Holdings, r ShareRequest) float64 {
	w := weight(r.Weight)
	equal := capacity / (sumWeights(others) + w)
	mine := equal * w
	if r.Wants <= mine || sumWants(others)+r.Wants <= capacity {
		return r.Wants
	}
	var extra, need float64
	each(others, r, func(wants, weight float64) {
		if share := equal * weight; wants < share {
			extra += share - wants
		} else {
			need += wants - share
		}
	})
	return mine + (r.Wants-mine)*(extra/need)
}

// FairShare gives each client what it wants when the clients together want no
// more than the capacity; otherwise every client is guaranteed its equal
// share, and what clients wanting less leave is divided equally among those
// wanting more, round after round, until nothing is left or all are satisfied.
func FairShare(capacity float64, others Holdings, r ShareRequest) float64 {
	w := weight(r.Weight)
	if r.Wants <= capacity*w/(sumWeights(others)+w) || sumWants(others)+r.Wants <= capacity {
		return r.Wants
	}
	type claim struct{ wants, weight, gets float64 }
	var claims []*claim
	each(others, r, func(wants, weight float64) { claims = append(claims, &claim{wants: wants, weight: weight}) })
	mine := claims[len(claims)-1] // each visits the requester last
	const epsilon = 1e-9
	left := capacity
	for left > epsilon && len(claims) > 0 {
		var weights float64
		for _, c := range claims {
			weights += c.weight
		}
		fair := left / weights
		if fair < epsilon {
			break
		}
		next := claims[:0]
		for _, c := range claims {
			need, share := c.wants-c.gets, fair*c.weight
			if need <= share {
				c.gets += need
				left -= need
			} else {
				c.gets += share
				left -= share
				next = append(next, c)
			}
		}
		claims = next
	}
	return mine.gets
}

// each calls f for every other client in id order (so float sums are
// reproducible), then for the requester.
func each(others Holdings, r ShareRequest, f func(wants, weight float64)) {
	for _, id := range slices.Sorted(maps.Keys(others)) {
		f(others[id].Wants, weight(others[id].Weight))
	}
	f(r.Wants, weight(r.Weight))
}

// ShareParams are a share limiter's parameters.
type ShareParams struct {
	Capacity     float64
	Algorithm    Algorithm
	Lease        int64   // ns a lease lasts
	Refresh      int64   // ns after which clients should ask again
	SafeCapacity float64 // what a client may use when it cannot ask; 0: capacity / clients
	Learning     int64   // ns of learning mode after the state was lost
}

// ShareState is a share limiter's state.
type ShareState struct {
	Holdings      Holdings
	Started       int64 // time of the first request since the state was created
	LearningUntil int64 // learning mode lasts until then
}

// Lease is the answer to a capacity request.
type Lease struct {
	Gets         float64
	Expires      int64
	Refresh      int64
	SafeCapacity float64
	Learning     bool
}

// Request runs the algorithm for one client at time now. has is what the
// client reports holding. A client reporting capacity the limiter has no
// record of, within p.Learning of the state's creation, means the state was
// lost (a Redis restart): the limiter then learns until that window ends,
// handing back what clients report (within what is unassigned) and 0 to new
// clients, so it does not overshoot while the holders make themselves known.
func (p *ShareParams) Request(s *ShareState, now int64, r ShareRequest, has float64) Lease {
	if s.Holdings == nil {
		s.Holdings, s.Started = Holdings{}, now
	}
	if _, known := s.Holdings[r.Client]; has > 0 && !known && now < s.Started+p.Learning {
		s.LearningUntil = s.Started + p.Learning
	}
	// expired leases are free capacity
	maps.DeleteFunc(s.Holdings, func(_ string, c Holding) bool { return c.Expires <= now })
	others := maps.Clone(s.Holdings)
	delete(others, r.Client)
	unassigned := max(0, p.Capacity-sumOf(others, func(c Holding) float64 { return c.Has }))
	learning := now < s.LearningUntil
	var gets float64
	switch {
	case learning:
		gets = min(has, unassigned)
	case p.Algorithm == AlgorithmNone:
		gets = r.Wants
	case p.Algorithm == AlgorithmStatic && p.SafeCapacity > 0:
		gets = min(r.Wants, p.SafeCapacity, unassigned)
	default:
		gets = min(algorithms[p.Algorithm](p.Capacity, others, r), unassigned)
	}
	gets = max(gets, 0)
	lease := Lease{Gets: gets, Expires: now + p.Lease, Refresh: p.Refresh, Learning: learning,
		SafeCapacity: cmp.Or(p.SafeCapacity, p.Capacity/float64(len(others)+1))}
	s.Holdings[r.Client] = Holding{Wants: r.Wants, Has: gets, Weight: weight(r.Weight), Expires: lease.Expires}
	return lease
}

// Return ends a client's lease at once (it leaves), freeing its capacity.
func (s *ShareState) Return(client string) bool {
	_, ok := s.Holdings[client]
	delete(s.Holdings, client)
	return ok
}
