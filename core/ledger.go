package core

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/store"
)

// Ledger counts decisions in memory and adds them to Redis once a second,
// so that a limiter's totals (Limiter.Totals) and a template's busiest
// instances (Service.Top) are those of every limitd sharing the Redis. It
// is an Observer: hand it to core.New as Options.Ledger, and run Run on a
// goroutine the caller owns, which flushes a last time when it stops.
//
// Counting costs no Redis command on the decision's path, granted or
// refused: a decision adds to a map under a mutex. Each flush is one
// pipeline whose size depends on the named limiters and templates decided
// on in the second, not on how many decisions nor on how many instances:
// per named limiter and template an HINCRBY per non-zero count and a
// PEXPIRE, and per template at most TopK ZINCRBY by refused and TopK by
// granted permits (its largest instances of the second) with a PEXPIRE
// per bucket. An instance has no totals of its own: a write a second for
// every key decided on would cost a fleet's Redis more than its decisions.
//
// Memory is bounded: at most MaxNames distinct limiters and instances are
// counted per interval. Past that, a decision on a new name still counts in
// its template's totals (templates are few) but not under its own name:
// Overflow counts those decisions.
//
// What counts: a rate decision granted or charged counts as granted; denied
// or refused in shadow mode as refused; one "voided" (a limiter of a
// several-limit call another refused) not at all. A concurrency slot counts
// as one permit the same way. Share capacity and lease renewals do not
// count.
type Ledger struct {
	st       *store.Store
	every    time.Duration
	maxNames int
	topK     int
	clock    func() time.Time

	mu  sync.Mutex
	cur tally

	overflow atomic.Int64
	failed   atomic.Int64
}

// LedgerOptions configure a Ledger; zero values take the defaults.
type LedgerOptions struct {
	Every    time.Duration    // between flushes; default 1 s
	MaxNames int              // distinct limiters and instances per interval; default 10,000
	TopK     int              // top entries per template, by refused and by granted, per flush; default 100
	Clock    func() time.Time // picks a flush's minute bucket; default time.Now
}

// tally is one interval's counts.
type tally struct {
	limiters  map[string]*store.Counts
	instances map[string]*instanceCounts
	templates map[string]*store.Counts
}

type instanceCounts struct {
	template string
	store.Counts
}

func newTally() tally {
	return tally{limiters: map[string]*store.Counts{}, instances: map[string]*instanceCounts{}, templates: map[string]*store.Counts{}}
}

func (t *tally) names() int { return len(t.limiters) + len(t.instances) }

// NewLedger returns a ledger that adds to st's Redis.
func NewLedger(st *store.Store, o LedgerOptions) *Ledger {
	l := &Ledger{st: st, every: o.Every, maxNames: o.MaxNames, topK: o.TopK, clock: o.Clock, cur: newTally()}
	if l.every <= 0 {
		l.every = time.Second
	}
	if l.maxNames <= 0 {
		l.maxNames = 10_000
	}
	if l.topK <= 0 {
		l.topK = 100
	}
	if l.clock == nil {
		l.clock = time.Now
	}
	return l
}

// StoreCall is not counted.
func (l *Ledger) StoreCall(Op, time.Duration) {}

// Decided counts e (see Ledger for what counts how).
func (l *Ledger) Decided(e Event) {
	var refused bool
	permits := e.Permits
	switch e.Kind {
	case EventRate:
		switch e.Outcome {
		case "granted", "charged":
		case "denied", "shadow":
			refused = true
		default:
			return
		}
	case EventSlot:
		permits = 1
		switch e.Outcome {
		case "granted":
		case "denied", "shadow":
			refused = true
		default:
			return
		}
	default:
		return
	}
	add := func(c *store.Counts) {
		if refused {
			c.RefusedCalls++
			c.RefusedPermits += permits
		} else {
			c.GrantedCalls++
			c.GrantedPermits += permits
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := &l.cur
	switch {
	case e.Limiter != "":
		c := t.limiters[e.Limiter]
		if c == nil {
			if t.names() >= l.maxNames {
				l.overflow.Add(1)
				return
			}
			c = &store.Counts{}
			t.limiters[e.Limiter] = c
		}
		add(c)
	case e.Template != "":
		c := t.templates[e.Template]
		if c == nil {
			c = &store.Counts{}
			t.templates[e.Template] = c
		}
		add(c)
		if e.Instance == "" {
			return
		}
		ic := t.instances[e.Instance]
		if ic == nil {
			if t.names() >= l.maxNames {
				l.overflow.Add(1)
				return
			}
			ic = &instanceCounts{template: e.Template}
			t.instances[e.Instance] = ic
		}
		add(&ic.Counts)
	}
}

// Overflow is how many decisions were not counted under their own name
// because the interval had MaxNames names already.
func (l *Ledger) Overflow() int64 { return l.overflow.Load() }

// Failed is how many flushes Redis did not take (their counts were kept
// for the next, as far as MaxNames allows).
func (l *Ledger) Failed() int64 { return l.failed.Load() }

// Run flushes every interval until ctx is done, then flushes once more (for
// at most 2 s) and returns.
func (l *Ledger) Run(ctx context.Context) {
	tick := time.NewTicker(l.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = l.Flush(fctx)
			cancel()
			return
		case <-tick.C:
			_ = l.Flush(ctx)
		}
	}
}

// Flush adds what was counted since the last flush to Redis and starts a
// new interval. When Redis does not take it, the counts go back into the
// new interval (as far as MaxNames allows) and the error is returned.
func (l *Ledger) Flush(ctx context.Context) error {
	l.mu.Lock()
	t := l.cur
	l.cur = newTally()
	l.mu.Unlock()
	if t.names() == 0 && len(t.templates) == 0 {
		return nil
	}
	err := l.st.AddTotals(ctx, l.batch(t, l.clock().UnixNano()/int64(time.Minute)))
	if err != nil {
		l.failed.Add(1)
		l.putBack(t)
	}
	return err
}

// batch is t as the store adds it: every count, and per template its topK
// instances by refused and by granted permits.
func (l *Ledger) batch(t tally, minute int64) store.TotalsBatch {
	b := store.TotalsBatch{Limiters: map[string]store.Counts{}, Templates: map[string]store.Counts{}}
	for n, c := range t.limiters {
		b.Limiters[n] = *c
	}
	for n, c := range t.templates {
		b.Templates[n] = *c
	}
	type entry struct {
		name string
		c    store.Counts
	}
	byTemplate := map[string][]entry{}
	for n, c := range t.instances {
		byTemplate[c.template] = append(byTemplate[c.template], entry{n, c.Counts})
	}
	top := func(es []entry, of func(store.Counts) int64) map[string]int64 {
		slices.SortFunc(es, func(a, b entry) int { return cmp.Or(cmp.Compare(of(b.c), of(a.c)), cmp.Compare(a.name, b.name)) })
		out := map[string]int64{}
		for _, e := range es[:min(len(es), l.topK)] {
			if of(e.c) == 0 {
				break
			}
			out[e.name] = of(e.c)
		}
		return out
	}
	for id, es := range byTemplate {
		b.Top = append(b.Top, store.TopAdd{Template: id, Minute: minute,
			Refused: top(es, func(c store.Counts) int64 { return c.RefusedPermits }),
			Granted: top(es, func(c store.Counts) int64 { return c.GrantedPermits })})
	}
	return b
}

// putBack adds t's counts into the current interval.
func (l *Ledger) putBack(t tally) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := &l.cur
	for id, x := range t.templates {
		if c.templates[id] == nil {
			c.templates[id] = &store.Counts{}
		}
		c.templates[id].Add(*x)
	}
	for n, x := range t.limiters {
		if c.limiters[n] == nil {
			if c.names() >= l.maxNames {
				l.overflow.Add(x.GrantedCalls + x.RefusedCalls)
				continue
			}
			c.limiters[n] = &store.Counts{}
		}
		c.limiters[n].Add(*x)
	}
	for n, x := range t.instances {
		if c.instances[n] == nil {
			if c.names() >= l.maxNames {
				l.overflow.Add(x.GrantedCalls + x.RefusedCalls)
				continue
			}
			c.instances[n] = &instanceCounts{template: x.template}
		}
		c.instances[n].Add(x.Counts)
	}
}
