package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// AcquireRequest asks a limiter for permits, or a concurrency limiter for a
// slot.
type AcquireRequest struct {
	Name    string
	Permits int64         // ≥ 1
	MaxWait time.Duration // limitd.Forever: no bound; negative is 0
	Block   bool          // wait out the delay before answering
	// Given says which of the settings above the caller set: a concurrency
	// limiter's acquire takes none, and a slot hint is tried only then.
	Given Given
	// Deadline, if set, is when the answer is due, for a front end that
	// puts no timer on each request's context: the decision's Redis part, a
	// blocking wait and every other Redis call of the acquire end by then.
	Deadline time.Time
}

// Given are the settings of an AcquireRequest its caller set.
type Given struct{ Permits, MaxWait, Block bool }

func (g Given) none() bool { return g == Given{} }

// first names the first setting given as errors name it, or "" for none.
func (g Given) first() string {
	switch {
	case g.Permits:
		return "permits"
	case g.MaxWait:
		return "max_wait"
	case g.Block:
		return "block"
	}
	return ""
}

// Acquired is the answer of Acquire: Rate for a rate limiter (or template
// instance), Slot for a concurrency limiter; the other is nil. Either may
// be a refusal (Granted false).
type Acquired struct {
	Rate *limitd.Decision
	Slot *limitd.SlotLease
}

// blockMargin is kept from a blocking acquire's deadline for the answer.
const blockMargin = 20 * time.Millisecond

// Acquire dispatches on the limiter's kind: rate limiters (and template
// instances) take permits, concurrency limiters a slot; a share limiter is
// ErrConflict. A name seen to be a concurrency limiter goes to the slot
// first; any other is tried as a rate limiter first and looked up once when
// the store answers another kind. A stale hint costs a round trip, never a
// wrong answer.
//
// A blocking acquire waits out its delay before it returns (asking only for
// what it can wait out before the context's deadline), or returns the
// context's error. A window grants now or not at all: a blocking acquire it
// refuses with a retry_after within max_wait waits that long and asks once
// more.
func (s *Service) Acquire(ctx context.Context, r AcquireRequest) (Acquired, error) {
	bc := bounded{ctx: ctx, at: r.Deadline}
	defer bc.stop()
	if _, slot := s.slots.get(r.Name); slot && r.Given.none() {
		l, err := s.acquireSlot(bc.get(), r.Name)
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			return Acquired{Slot: &l}, err
		}
		s.slots.forget(r.Name) // replaced or deleted since: ask as for any name
	}
	if r.Permits < 1 {
		return Acquired{}, invalid("permits", "must be ≥ 1", r.Permits)
	}
	maxWait := max(0, r.MaxWait)
	if dl, ok := bc.deadline(); ok && r.Block {
		// A grant nobody could wait out before the deadline would take
		// permits nobody uses: ask only for what fits.
		maxWait = min(maxWait, max(0, dl.Sub(s.clock.Now())-blockMargin))
	}
	d, err := s.store.AcquireWithin(ctx, r.Name, r.Permits, maxWait, s.within(r.Deadline))
	if errors.Is(err, store.ErrConflict) {
		return s.acquireOther(bc.get(), r, err)
	}
	if err != nil {
		return Acquired{}, err
	}
	if !d.Granted && s.inShadow(bc.get(), r.Name, d) {
		d = shadowGrant(d, r.Permits)
	}
	seen := d
	if r.Block && !d.Granted && d.Window && d.Limit > 0 && d.RetryAfter <= int64(maxWait) {
		// One request: one decision observed, the second, its grant's
		// delay the time waited.
		waited := d.RetryAfter
		if err := s.clock.Sleep(ctx, time.Duration(waited)); err != nil {
			return Acquired{}, err
		}
		d, err = s.store.AcquireWithin(ctx, r.Name, r.Permits, maxWait-time.Duration(waited), s.within(r.Deadline))
		if err != nil {
			return Acquired{}, err
		}
		if seen = d; seen.Granted {
			seen.Delay += waited
		}
	}
	s.decided(ctx, r.Name, r.Permits, seen)
	if r.Block && d.Granted && d.Delay > 0 {
		if err := s.clock.Sleep(ctx, time.Duration(d.Delay)); err != nil {
			return Acquired{}, err
		}
	}
	return Acquired{Rate: &d}, nil
}

// within is the bound of one decision's Redis part: DecideTimeout, or what
// is left until deadline (zero: none). It travels with the call into a
// batch (store.AcquireWithin), where client timeouts and retries would add
// up over a decision's round trips.
func (s *Service) within(deadline time.Time) time.Duration {
	if deadline.IsZero() {
		return s.decide
	}
	return max(min(s.decide, time.Until(deadline)), 1) // passed: fails at once
}

// bounded is a context for the steps of an acquire besides its decision
// (which bounds itself), ending at a deadline (zero: ctx as it is); its
// timer is made only when a step takes it.
type bounded struct {
	ctx    context.Context
	at     time.Time
	cancel context.CancelFunc
}

func (b *bounded) get() context.Context {
	if !b.at.IsZero() && b.cancel == nil {
		b.ctx, b.cancel = context.WithDeadline(b.ctx, b.at)
	}
	return b.ctx
}

func (b *bounded) deadline() (time.Time, bool) {
	dl, ok := b.ctx.Deadline()
	if !b.at.IsZero() && (!ok || b.at.Before(dl)) {
		return b.at, true
	}
	return dl, ok
}

func (b *bounded) stop() {
	if b.cancel != nil {
		b.cancel()
	}
}

func (s *Service) decided(ctx context.Context, name string, permits int64, d limitd.Decision) {
	lim, tpl := s.subjectOf(ctx, name, d.Instance)
	e := Event{Kind: EventRate, Limiter: lim, Template: tpl, Instance: instanceOf(name, tpl), Outcome: "granted", Permits: permits}
	if d.Shadow {
		e.Outcome = "shadow"
	} else if d.Granted {
		e.Delay, e.Lateness = time.Duration(d.Delay), time.Duration(d.Lateness)
	} else {
		e.Outcome = "denied"
	}
	s.obs.Decided(e)
}

// acquireOther finishes an acquire the store refused as a rate acquire: a
// concurrency limiter gets a slot, a share limiter the store's conflict.
func (s *Service) acquireOther(ctx context.Context, r AcquireRequest, conflict error) (Acquired, error) {
	info, err := s.store.Get(ctx, r.Name)
	if err != nil {
		return Acquired{}, err
	}
	if info.Config.Kind != limiter.KindConcurrency {
		return Acquired{}, conflict
	}
	if f := r.Given.first(); f != "" {
		return Acquired{}, invalid(f, fmt.Sprintf("is not a setting of a concurrency limiter's acquire: %q is a concurrency limiter, whose acquire takes none", r.Name), nil)
	}
	s.slots.set(r.Name, struct{}{})
	l, err := s.acquireSlot(ctx, r.Name)
	return Acquired{Slot: &l}, err
}

func (s *Service) acquireSlot(ctx context.Context, name string) (limitd.SlotLease, error) {
	l, err := s.store.AcquireSlot(ctx, name)
	if err != nil {
		return l, err
	}
	outcome := "granted"
	if !l.Granted {
		outcome = "denied"
		l.RetryAfter = max(l.RetryAfter, 0)
		if s.slotInShadow(ctx, name) {
			outcome = "shadow"
			l = limitd.SlotLease{Granted: true, Shadow: true, RetryAfter: l.RetryAfter, InUse: l.InUse, Limit: l.Limit}
		}
	}
	s.event(ctx, EventSlot, name, outcome)
	return l, nil
}

// AcquireAllRequest asks several limiters for permits in one call, all or
// nothing: the call is granted only if every limiter grants.
type AcquireAllRequest struct {
	Requests []LimiterPermits // each limiter once, in result order; at most MaxAcquireAll
	MaxWait  time.Duration    // limitd.Forever: no bound; negative is 0; for each limiter
	Block    bool             // wait out the longest delay before answering
}

// LimiterPermits is one limiter's part of an AcquireAllRequest.
type LimiterPermits struct {
	Name    string
	Permits int64 // ≥ 0; 0 checks the limiter without taking anything
}

// AcquireAllResult is the answer of AcquireAll.
type AcquireAllResult struct {
	// Granted: every limiter granted (a refusal in shadow mode counting as
	// a grant) and took its permits. False: nothing was taken.
	Granted bool
	// Results are each limiter's own decision, in request order: in a
	// refused call, those that would have granted say so, though nothing
	// was taken.
	Results []limitd.Decision
}

// MaxAcquireAll is the most limiters one AcquireAll may name.
const MaxAcquireAll = store.MaxMultiRequests

// AcquireAll takes permits from several rate limiters at once, all or
// nothing (store.Store.AcquireAll says how atomic that is). A blocking call
// waits out the longest granted delay. Bad input is a *limiter.FieldError
// naming requests[i].name or requests[i].permits; a missing limiter
// ErrNotFound, a lease kind ErrConflict; on any error nothing is taken.
//
// Shadow mode: when every limiter that refused is in shadow mode, the call
// is asked again with their refusals marked as not refusing
// (limitd.MultiRequest.Optional), a second decision at a new Redis time.
func (s *Service) AcquireAll(ctx context.Context, r AcquireAllRequest) (AcquireAllResult, error) {
	if len(r.Requests) > MaxAcquireAll {
		return AcquireAllResult{}, invalid("requests", "must name at most "+strconv.Itoa(MaxAcquireAll)+" limiters", len(r.Requests))
	}
	reqs := make([]limitd.MultiRequest, len(r.Requests))
	for i, q := range r.Requests {
		reqs[i] = limitd.MultiRequest{Name: q.Name, Permits: q.Permits, Optional: s.shadow}
	}
	maxWait := max(0, r.MaxWait)
	if dl, ok := ctx.Deadline(); ok && r.Block {
		maxWait = min(maxWait, max(0, dl.Sub(s.clock.Now())-blockMargin))
	}
	md, err := s.acquireAll(ctx, reqs, maxWait)
	if err != nil {
		return AcquireAllResult{}, err
	}
	if !md.Granted && !s.shadow && s.shadowRefusals(ctx, reqs, md.Decisions) {
		if md, err = s.acquireAll(ctx, reqs, maxWait); err != nil {
			return AcquireAllResult{}, err
		}
	}
	out := AcquireAllResult{Granted: md.Granted, Results: md.Decisions}
	var longest int64
	for i, d := range out.Results {
		switch {
		case !d.Granted && md.Granted: // optional: in shadow mode
			d = shadowGrant(d, reqs[i].Permits)
		case d.Granted && !md.Granted:
			s.report(ctx, reqs[i].Name, reqs[i].Permits, d, "voided")
			continue
		case d.Granted:
			longest = max(longest, d.Delay)
		}
		out.Results[i] = d
		s.decided(ctx, reqs[i].Name, reqs[i].Permits, d)
	}
	if r.Block && out.Granted && longest > 0 {
		if err := s.clock.Sleep(ctx, time.Duration(longest)); err != nil {
			return AcquireAllResult{}, err
		}
	}
	return out, nil
}

// acquireAll is one store call, bounded and observed as Acquire's.
func (s *Service) acquireAll(ctx context.Context, reqs []limitd.MultiRequest, maxWait time.Duration) (limitd.MultiDecision, error) {
	dctx, cancel := context.WithTimeout(ctx, s.decide)
	md, err := s.store.AcquireAll(dctx, reqs, maxWait)
	cancel()
	return md, err
}

// shadowRefusals reports whether every limiter that refused ds is in shadow
// mode, and marks their requests optional if so.
func (s *Service) shadowRefusals(ctx context.Context, reqs []limitd.MultiRequest, ds []limitd.Decision) bool {
	var shadowed []int
	for i, d := range ds {
		if d.Granted {
			continue
		}
		if !s.inShadow(ctx, reqs[i].Name, d) {
			return false // a refusal that stands
		}
		shadowed = append(shadowed, i)
	}
	for _, i := range shadowed {
		reqs[i].Optional = true
	}
	return len(shadowed) > 0
}

func (s *Service) report(ctx context.Context, name string, permits int64, d limitd.Decision, outcome string) {
	lim, tpl := s.subjectOf(ctx, name, d.Instance)
	s.obs.Decided(Event{Kind: EventRate, Limiter: lim, Template: tpl, Instance: instanceOf(name, tpl), Outcome: outcome, Permits: permits})
}

// hints remember one fact per name that saves a round trip (slots: names
// seen to be concurrency limiters; shadows: shadow mode by version;
// instances: a template's instance count). A stale slot hint is answered
// ErrConflict or ErrNotFound; a shadow hint holds for one version, a count
// for instancesFor. Past maxHints names they start over, so that names of
// deleted limiters and templates do not pile up.
type hints[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

const maxHints = 4096

func (h *hints[V]) get(name string) (V, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[name]
	return v, ok
}

func (h *hints[V]) set(name string, v V) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHints {
		h.m = map[string]V{}
	}
	h.m[name] = v
}

func (h *hints[V]) forget(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, name)
}
