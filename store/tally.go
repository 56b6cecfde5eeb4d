package store

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd"
)

// Tally counts decisions in memory and adds them to the Redis totals
// (AddTotals) when flushed, about once a second: the one way every process
// that decides (a limitd server's ledger, a Go client over Redis) writes
// them, so that each flush costs Redis the same bounded number of commands.
// It is safe for concurrent use; the caller owns the loop that flushes it.
//
// A flush is one pipeline whose size depends on the named limiters and
// templates counted in the interval, not on how many decisions nor on how
// many instances: per named limiter and template an HINCRBY per non-zero
// count and a PEXPIRE, and per template at most TopK ZINCRBY by refused and
// TopK by granted permits (its largest instances of the interval) with a
// PEXPIRE per bucket. An instance has no totals of its own: a write a
// second for every key decided on would cost a fleet's Redis more than its
// decisions.
//
// Memory is bounded: at most MaxNames distinct limiters and instances are
// counted per interval. Past that, a decision on a new name still counts in
// its template's totals (templates are few) but not under its own name:
// Overflow counts those decisions.
type Tally struct {
	st       *Store
	maxNames int
	topK     int
	clock    func() time.Time

	mu  sync.Mutex
	cur interval

	overflow atomic.Int64
	failed   atomic.Int64
}

// TallyOptions configure a Tally; zero values take the defaults.
type TallyOptions struct {
	MaxNames int              // distinct limiters and instances per interval; default 10,000
	TopK     int              // top entries per template, by refused and by granted, per flush; default 100
	Clock    func() time.Time // picks a flush's minute bucket; default time.Now
}

// interval is one interval's counts.
type interval struct {
	limiters  map[string]*limitd.Counts
	instances map[string]*instanceCounts
	templates map[string]*limitd.Counts
}

type instanceCounts struct {
	template string
	limitd.Counts
}

func newInterval() interval {
	return interval{limiters: map[string]*limitd.Counts{}, instances: map[string]*instanceCounts{}, templates: map[string]*limitd.Counts{}}
}

func (t *interval) names() int { return len(t.limiters) + len(t.instances) }

// NewTally returns a tally that adds to s's Redis.
func (s *Store) NewTally(o TallyOptions) *Tally {
	t := &Tally{st: s, maxNames: o.MaxNames, topK: o.TopK, clock: o.Clock, cur: newInterval()}
	if t.maxNames <= 0 {
		t.maxNames = 10_000
	}
	if t.topK <= 0 {
		t.topK = 100
	}
	if t.clock == nil {
		t.clock = time.Now
	}
	return t
}

// Add counts c under s (nothing when s names neither a limiter nor a
// template).
func (t *Tally) Add(s limitd.Subject, c limitd.Counts) {
	if c.IsZero() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.overflow.Add(t.cur.add(s, c, t.maxNames))
}

// add counts c under s and returns the calls not counted under their own
// name for want of room.
func (t *interval) add(s limitd.Subject, c limitd.Counts, maxNames int) (dropped int64) {
	switch {
	case s.Limiter != "":
		x := t.limiters[s.Limiter]
		if x == nil {
			if t.names() >= maxNames {
				return c.GrantedCalls + c.RefusedCalls
			}
			x = &limitd.Counts{}
			t.limiters[s.Limiter] = x
		}
		x.Add(c)
	case s.Template != "":
		x := t.templates[s.Template]
		if x == nil {
			x = &limitd.Counts{}
			t.templates[s.Template] = x
		}
		x.Add(c)
		if s.Instance != "" {
			return t.addInstance(s.Template, s.Instance, c, maxNames)
		}
	}
	return 0
}

// Overflow is how many decisions were not counted under their own name
// because the interval had MaxNames names already.
func (t *Tally) Overflow() int64 { return t.overflow.Load() }

// Failed is how many flushes Redis did not take (their counts were kept
// for the next, as far as MaxNames allows).
func (t *Tally) Failed() int64 { return t.failed.Load() }

// Flush adds what was counted since the last flush to Redis and starts a
// new interval. When Redis does not take it, the counts go back into the
// new interval (as far as MaxNames allows) and the error is returned.
func (t *Tally) Flush(ctx context.Context) error {
	t.mu.Lock()
	iv := t.cur
	t.cur = newInterval()
	t.mu.Unlock()
	if iv.names() == 0 && len(iv.templates) == 0 {
		return nil
	}
	err := t.st.AddTotals(ctx, iv.batch(t.clock().UnixNano()/int64(time.Minute), t.topK))
	if err != nil {
		t.failed.Add(1)
		t.putBack(iv)
	}
	return err
}

// batch is t as the store adds it: every count, and per template its topK
// instances by refused and by granted permits.
func (t *interval) batch(minute int64, topK int) TotalsBatch {
	b := TotalsBatch{Limiters: map[string]limitd.Counts{}, Templates: map[string]limitd.Counts{}}
	for n, c := range t.limiters {
		b.Limiters[n] = *c
	}
	for n, c := range t.templates {
		b.Templates[n] = *c
	}
	type entry struct {
		name string
		c    limitd.Counts
	}
	byTemplate := map[string][]entry{}
	for n, c := range t.instances {
		byTemplate[c.template] = append(byTemplate[c.template], entry{n, c.Counts})
	}
	top := func(es []entry, of func(limitd.Counts) int64) map[string]int64 {
		slices.SortFunc(es, func(a, b entry) int { return cmp.Or(cmp.Compare(of(b.c), of(a.c)), cmp.Compare(a.name, b.name)) })
		out := map[string]int64{}
		for _, e := range es[:min(len(es), topK)] {
			if of(e.c) == 0 {
				break
			}
			out[e.name] = of(e.c)
		}
		return out
	}
	for id, es := range byTemplate {
		b.Top = append(b.Top, TopAdd{Template: id, Minute: minute,
			Refused: top(es, func(c limitd.Counts) int64 { return c.RefusedPermits }),
			Granted: top(es, func(c limitd.Counts) int64 { return c.GrantedPermits })})
	}
	return b
}

// putBack adds iv's counts into the current interval.
func (t *Tally) putBack(iv interval) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var dropped int64
	for n, x := range iv.limiters {
		dropped += t.cur.add(limitd.Subject{Limiter: n}, *x, t.maxNames)
	}
	// A template's counts go back whole, its instances' by name only:
	// instance counts are part of their template's already.
	for id, x := range iv.templates {
		dropped += t.cur.add(limitd.Subject{Template: id}, *x, t.maxNames)
	}
	for n, x := range iv.instances {
		dropped += t.cur.addInstance(x.template, n, x.Counts, t.maxNames)
	}
	t.overflow.Add(dropped)
}

// addInstance counts c under instance n of template id, not in the
// template's totals.
func (t *interval) addInstance(id, n string, c limitd.Counts, maxNames int) (dropped int64) {
	ic := t.instances[n]
	if ic == nil {
		if t.names() >= maxNames {
			return c.GrantedCalls + c.RefusedCalls
		}
		ic = &instanceCounts{template: id}
		t.instances[n] = ic
	}
	ic.Add(c)
	return 0
}
