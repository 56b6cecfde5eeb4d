package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Counting rules: how a call that meters hits against several counters (a
// rate limit service's descriptors) is decided. The front end translates
// its protocol into a CountRequest and the CountResult back; every rule of
// the decision (counting, shadow, quota) lives here.

// Counting says how Count counts a call's hits.
type Counting int

const (
	// CountEvery counts every counter's hits whether or not they fit or the
	// call is refused, as the Envoy reference server does (docs/envoy.md
	// compares the two): a counter is over when its hits do not fit (a
	// check, 0 hits, when it already is), and the call is refused when one
	// is over (see CountRequest).
	CountEvery Counting = iota
	// CountStrict decides the call all or nothing (AcquireAll).
	CountStrict
)

// countingNames are the Counting values as settings name them.
var countingNames = [...]string{CountEvery: "reference", CountStrict: "strict"}

// String is the counting's setting name: "reference" or "strict".
func (c Counting) String() string {
	if c < 0 || int(c) >= len(countingNames) {
		return "Counting(" + strconv.Itoa(int(c)) + ")"
	}
	return countingNames[c]
}

// ParseCounting reads a counting setting: "reference" (CountEvery) or
// "strict" (CountStrict).
func ParseCounting(s string) (Counting, error) {
	if c := slices.Index(countingNames[:], s); c >= 0 {
		return Counting(c), nil
	}
	return 0, fmt.Errorf("must be one of reference, strict (got %q)", s)
}

// CountRequest is one metered call: a counter per request descriptor, in
// the order the answers come back. Shadow and quota mode are the Envoy
// rules' (docs/envoy.md): a counter in shadow mode never refuses
// (Count.Shadow), Options.Shadow lets every call through
// (CountResult.Shadowed), and quota counters refuse together, when every
// one is over (with Options.QuotaMode, every counter but the Unlimited).
type CountRequest struct {
	Counters []Counter // at most MaxAcquireAll with a Name
	Counting Counting
}

// Counter is one counter of a CountRequest.
type Counter struct {
	// Name is the limiter or template instance that counts (a rate kind).
	// Empty: no limit applies; it is never over.
	Name string
	// Unlimited: a rule says there is no limit (Name is empty); unlike a
	// counter without a limit it takes no part in quota mode.
	Unlimited bool
	Hits      int64 // ≥ 0; 0 checks without counting
	Quota     bool  // a quota counter (see CountRequest)
	// Fixed, under CountEvery, counts the hits in a fixed window of their
	// own (store.Fixed), not in Name's state, though Name still names the
	// counter and its shadow mode; CountStrict ignores it.
	Fixed *FixedWindow
}

// FixedWindow is a Counter's fixed window: Limit hits per Period, aligned
// to the Unix epoch.
type FixedWindow = store.Fixed

// CountResult is the decision of a CountRequest.
type CountResult struct {
	// Refused: the call is refused (by an over counter neither in shadow
	// mode nor a quota counter, or by all its quota counters).
	Refused bool
	// Shadowed: the counters refused the call, and the service's global
	// shadow mode let it through (Refused is false).
	Shadowed bool
	Counts   []Count // in request order
}

// Count is one counter's decision.
type Count struct {
	// Over: the hits do not fit the counter's limit (a check: the counter
	// is past it). Never set for a counter without a Name.
	Over   bool
	Shadow bool // Over, but in shadow mode: it does not refuse the call
	// Counted: the hits were counted. CountEvery: always, but for a
	// counter the over-limit cache answered; CountStrict: when the call
	// was granted.
	Counted bool
	// Window: a window counts (Limit, Remaining, Used and Reset are its);
	// else a schedule or smooth limiter.
	Window           bool
	Limit, Remaining int64 // Remaining after the call, 0 when over
	// Used is a window's count after the call (CountEvery: it may pass
	// Limit).
	Used       int64
	Reset      int64 // when a window resets (Unix ns, Redis clock)
	RetryAfter int64 // for a schedule or smooth counter that is over: when the hits would fit (ns)
	Now        int64 // the decision's Redis time (Unix ns); 0 without a Name
}

// Refuses: Over and not in shadow mode (a quota counter refuses together).
func (c Count) Refuses() bool { return c.Over && !c.Shadow }

// Count decides a metered call (see Counting and CountRequest). Bad input
// is a *limiter.FieldError naming counters[i].name or counters[i].hits; a
// missing limiter ErrNotFound, one of a lease kind ErrConflict. The
// observer sees each counter's decision ("granted", "denied", "shadow", or
// in a refused CountStrict call "voided").
func (s *Service) Count(ctx context.Context, r CountRequest) (CountResult, error) {
	named := 0
	for i, c := range r.Counters {
		f := "counters[" + strconv.Itoa(i) + "]"
		switch {
		case c.Hits < 0:
			return CountResult{}, invalid(f+".hits", "must be ≥ 0 (0 checks without counting)", c.Hits)
		case c.Name == "":
			continue
		case c.Unlimited:
			return CountResult{}, invalid(f+".unlimited", "must not be given with a name: an unlimited counter has no limiter", nil)
		case c.Quota && r.Counting == CountStrict:
			return CountResult{}, invalid(f+".quota", "needs the reference counting: a strict call is all or nothing", nil)
		}
		if limitd.CheckName(c.Name) != nil { // the field's name is made for an error only
			return CountResult{}, limitd.CheckNameAs(f+".name", c.Name)
		}
		named++
	}
	if named > MaxAcquireAll {
		return CountResult{}, invalid("counters", "must name at most "+strconv.Itoa(MaxAcquireAll)+" limiters", named)
	}
	if s.quota && r.Counting == CountStrict {
		return CountResult{}, invalid("counting", "must be reference in quota mode: a strict call is all or nothing", r.Counting.String())
	}
	out := CountResult{Counts: make([]Count, len(r.Counters))}
	if named > 0 {
		var err error
		switch r.Counting {
		case CountEvery:
			err = s.countEvery(ctx, r.Counters, out.Counts)
		case CountStrict:
			err = s.countStrict(ctx, r.Counters, out.Counts)
		default:
			return CountResult{}, invalid("counting", "must be reference or strict", r.Counting.String())
		}
		if err != nil {
			return CountResult{}, err
		}
	}
	out.Refused = s.refuses(r.Counters, out.Counts)
	if out.Refused && s.shadow {
		out.Refused, out.Shadowed = false, true
	}
	return out, nil
}

// refuses applies the call's rules to its counters' decisions (see
// CountResult.Refused).
func (s *Service) refuses(cs []Counter, counts []Count) bool {
	quotas, quotasOver := 0, 0
	for i, c := range cs {
		over := counts[i].Refuses()
		if c.Quota || s.quota && !c.Unlimited {
			quotas++
			if over {
				quotasOver++
			}
			continue
		}
		if over {
			return true
		}
	}
	return quotas > 0 && quotas == quotasOver
}

// countStrict decides the counters all or nothing in one AcquireAll:
// counters named twice ask once, for their hits together. With the
// over-limit cache, a counter it holds as over refuses the call at once and
// the others are only checked (the reference's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT); a window counter a call of one
// hit finds full is put in it until one hit fits again.
func (s *Service) countStrict(ctx context.Context, cs []Counter, counts []Count) error {
	var sent time.Time
	if s.over != nil {
		sent = s.clock.Now()
		if cached := s.cachedOver(ctx, cs, counts, sent, true); cached != nil {
			return s.check(ctx, cs, counts, cached, -1)
		}
	}
	reqs, at := group(cs, nil)
	res, err := s.acquireGroups(ctx, reqs)
	if re, ok := errors.AsType[*limiter.RequestError](err); ok && re.Field == "permits" {
		// More hits than the limiter could ever grant at once: a refusal,
		// not bad input. Every counter is checked; the one at fault is over.
		return s.check(ctx, cs, counts, nil, re.Index)
	}
	if err != nil {
		return err
	}
	for i, c := range cs {
		if c.Name == "" {
			continue
		}
		d := res.Results[at[i]]
		over := !d.Granted || d.Shadow
		counts[i] = countOf(d, over, res.Granted && !over, reqs[at[i]].Permits)
		if over {
			counts[i].Shadow = s.limiterShadow(ctx, c.Name, d)
		}
		if over && !counts[i].Shadow && s.over != nil && d.Window && d.Wait <= 0 && reqs[at[i]].Permits == 1 && d.RetryAfter > 0 {
			// full: one hit fits again RetryAfter after the decision
			s.holdOver(c.Name, d, counts[i].Used, sent, d.RetryAfter)
		}
	}
	return nil
}

// cachedOver answers from the over-limit cache the counters it holds as
// over, reporting them denied (or shadow); nil when it holds none. A strict
// call leaves those in shadow mode to Redis: they never refuse.
func (s *Service) cachedOver(ctx context.Context, cs []Counter, counts []Count, now time.Time, strict bool) []bool {
	var cached []bool
	for i, c := range cs {
		if c.Name == "" || c.Hits == 0 {
			continue
		}
		e, ok := s.over.get(c.Name, now)
		if !ok {
			continue
		}
		shadow := s.limiterShadow(ctx, c.Name, e.d)
		if strict && shadow {
			continue
		}
		if cached == nil {
			cached = make([]bool, len(cs))
		}
		cached[i] = true
		counts[i] = e.count(now)
		counts[i].Shadow = shadow
		outcome := "denied"
		if shadow {
			outcome = "shadow"
		}
		s.report(ctx, c.Name, c.Hits, e.d, outcome)
	}
	return cached
}

// check decides a refused strict call: the counters skip does not exclude
// are checked, not counted, each saying whether its hits would have fit;
// group's request fault (-1: none) is over whatever its state.
func (s *Service) check(ctx context.Context, cs []Counter, counts []Count, skip []bool, fault int) error {
	reqs, at := group(cs, skip)
	if len(reqs) == 0 {
		return nil
	}
	checks := make([]LimiterPermits, len(reqs))
	for j, q := range reqs {
		checks[j] = LimiterPermits{Name: q.Name}
	}
	res, err := s.acquireGroups(ctx, checks)
	if err != nil {
		return err
	}
	for i, c := range cs {
		if c.Name == "" || skip != nil && skip[i] {
			continue
		}
		d := res.Results[at[i]]
		over := at[i] == fault || !d.Granted || d.Window && d.Wait < reqs[at[i]].Permits
		counts[i] = countOf(d, over, false, 0)
		if over {
			counts[i].Shadow = s.limiterShadow(ctx, c.Name, d)
		}
	}
	return nil
}

func (s *Service) acquireGroups(ctx context.Context, reqs []LimiterPermits) (AcquireAllResult, error) {
	res, err := s.AcquireAll(ctx, AcquireAllRequest{Requests: reqs})
	if err == nil && len(res.Results) != len(reqs) {
		err = fmt.Errorf("core: %d decisions for %d limiters: %w", len(res.Results), len(reqs), store.ErrBadReply)
	}
	return res, err
}

// group asks once per limiter for the named counters skip does not
// exclude, their hits together: at[i] is counter i's request.
func group(cs []Counter, skip []bool) (reqs []LimiterPermits, at []int) {
	at = make([]int, len(cs))
	seen := map[string]int{}
	for i, c := range cs {
		if c.Name == "" || skip != nil && skip[i] {
			continue
		}
		j, ok := seen[c.Name]
		if !ok {
			j = len(reqs)
			seen[c.Name] = j
			reqs = append(reqs, LimiterPermits{Name: c.Name})
		}
		at[i] = j
		reqs[j].Permits += c.Hits
	}
	return reqs, at
}

// holdOver puts a window counter found over in the over-limit cache until
// after ns past decision d, counted from the local time the call was sent.
func (s *Service) holdOver(name string, d limitd.Decision, used int64, sent time.Time, after int64) {
	s.over.put(name, overEntry{until: sent.Add(time.Duration(after)), at: sent,
		limit: d.Limit, used: used, reset: d.Position, redisNow: d.Now,
		d: limitd.Decision{Instance: d.Instance, Version: d.Version}})
}

// countOf is a counter's Count from its decision d for hits. A window's
// count is the one a charge reports, or what its remainder tells. An over
// schedule or smooth counter says when the hits would fit: an acquire's
// retry_after, or after a charge, when a new caller would go.
func countOf(d limitd.Decision, over, counted bool, hits int64) Count {
	c := Count{Over: over, Counted: counted, Now: d.Now}
	switch {
	case d.Window:
		c.Window, c.Limit, c.Reset = true, d.Limit, d.Position
		c.Remaining = max(d.Wait, 0)
		if !counted && !over {
			c.Remaining += hits // a refused call took nothing
		}
		c.Used = d.Limit - c.Remaining
		if d.Charged {
			c.Used = d.Count
		}
		if over {
			c.Remaining = 0
		}
	case over && d.Charged:
		c.RetryAfter = max(d.Delay, 0)
	case over:
		c.RetryAfter = max(d.RetryAfter, 0)
	}
	return c
}

// countEvery counts every counter's hits in one round trip
// (store.Request.Charge), in order: a counter named twice counts twice. An
// error fails the call, but the counters answered before it have counted.
// A counter the over-limit cache holds is answered from it, not counted; a
// window counter found over is put in it.
func (s *Service) countEvery(ctx context.Context, cs []Counter, counts []Count) error {
	var sent time.Time
	var cached []bool // counters the cache answered
	if s.over != nil {
		sent = s.clock.Now()
		cached = s.cachedOver(ctx, cs, counts, sent, false)
	}
	asked := func(i int) bool { return cs[i].Name != "" && (cached == nil || !cached[i]) }
	reqs := make([]store.Request, 0, len(cs))
	for i, c := range cs {
		if asked(i) {
			reqs = append(reqs, store.Request{Name: c.Name, Permits: c.Hits, Charge: true, Fixed: c.Fixed})
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	outs := s.store.AcquireManyWithin(ctx, reqs, s.decide)
	j := 0
	for i, c := range cs {
		if !asked(i) {
			continue
		}
		o := outs[j]
		j++
		if o.Err != nil {
			return o.Err
		}
		d := o.Decision
		counts[i] = countOf(d, !d.Granted, true, c.Hits)
		outcome := "granted"
		if counts[i].Over {
			outcome = "denied"
			if counts[i].Shadow = s.limiterShadow(ctx, c.Name, d); counts[i].Shadow {
				outcome = "shadow"
			}
			if s.over != nil && d.Window && d.Delay > 0 {
				// over until a permit fits again: Delay after the decision
				s.holdOver(c.Name, d, counts[i].Used, sent, d.Delay)
			}
		}
		s.report(ctx, c.Name, c.Hits, d, outcome)
	}
	return nil
}
