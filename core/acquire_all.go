package core

import (
	"context"
	"strconv"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/store"
)

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
