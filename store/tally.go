package store

import (
	"context"
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

	mu    sync.Mutex
	cur   interval
	spare interval // the interval flushed last, emptied for the next one

	overflow atomic.Int64
	failed   atomic.Int64
}

// TallyOptions configure a Tally; zero values take the defaults.
type TallyOptions struct {
	MaxNames int              // distinct limiters and instances per interval; default 10,000
	TopK     int              // top entries per template, by refused and by granted, per flush; default 100
	Clock    func() time.Time // picks a flush's minute bucket; default time.Now
}

// interval is one interval's counts. The counts of limiters and instances
// are values in one slice, which the maps index: counting a name new to
// the interval allocates nothing once an earlier interval held as many
// names, and the collector has no object per name to scan. Two intervals
// take turns (Tally.spare), each keeping its maps' and slice's room.
type interval struct {
	limiters  map[string]int32 // name → index in names
	instances map[string]int32 // name → index in names
	names     []named
	templates map[string]*limitd.Counts // few: a template's totals
}

// named is the counts of a limiter (template "") or of an instance of
// template.
type named struct {
	name, template string
	limitd.Counts
}

func newInterval() interval {
	return interval{limiters: map[string]int32{}, instances: map[string]int32{}, templates: map[string]*limitd.Counts{}}
}

// reset empties t for another interval, keeping its room.
func (t *interval) reset() {
	clear(t.limiters)
	clear(t.instances)
	clear(t.templates)
	clear(t.names) // let go of the names' strings
	t.names = t.names[:0]
}

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
		return t.addNamed(t.limiters, s.Limiter, "", c, maxNames)
	case s.Template != "":
		x := t.templates[s.Template]
		if x == nil {
			x = &limitd.Counts{}
			t.templates[s.Template] = x
		}
		x.Add(c)
		if s.Instance != "" {
			return t.addNamed(t.instances, s.Instance, s.Template, c, maxNames)
		}
	}
	return 0
}

// addNamed counts c under name in m (t.limiters, or t.instances of
// template), not in a template's totals.
func (t *interval) addNamed(m map[string]int32, name, template string, c limitd.Counts, maxNames int) (dropped int64) {
	if i, ok := m[name]; ok {
		t.names[i].Add(c)
		return 0
	}
	if len(t.names) >= maxNames {
		return c.GrantedCalls + c.RefusedCalls
	}
	m[name] = int32(len(t.names))
	t.names = append(t.names, named{name: name, template: template, Counts: c})
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
	t.cur, t.spare = t.spare, interval{}
	if t.cur.limiters == nil {
		t.cur = newInterval()
	}
	t.mu.Unlock()
	var err error
	if len(iv.names) > 0 || len(iv.templates) > 0 {
		err = t.st.AddTotals(ctx, iv.batch(t.clock().UnixNano()/int64(time.Minute), t.topK))
		if err != nil {
			t.failed.Add(1)
			t.putBack(iv)
		}
	}
	iv.reset()
	t.mu.Lock()
	if t.spare.limiters == nil {
		t.spare = iv
	}
	t.mu.Unlock()
	return err
}

// batch is t as the store adds it: every count, and per template its topK
// instances by refused and by granted permits.
func (t *interval) batch(minute int64, topK int) TotalsBatch {
	b := TotalsBatch{Limiters: make(map[string]limitd.Counts, len(t.limiters)), Templates: make(map[string]limitd.Counts, len(t.templates))}
	for id, c := range t.templates {
		b.Templates[id] = *c
	}
	type tops struct{ refused, granted top }
	byTemplate := map[string]*tops{}
	for i := range t.names {
		x := &t.names[i]
		if x.template == "" {
			b.Limiters[x.name] = x.Counts
			continue
		}
		tp := byTemplate[x.template]
		if tp == nil {
			tp = &tops{refused: top{k: topK}, granted: top{k: topK}}
			byTemplate[x.template] = tp
		}
		tp.refused.offer(x.name, x.RefusedPermits)
		tp.granted.offer(x.name, x.GrantedPermits)
	}
	for id, tp := range byTemplate {
		b.Top = append(b.Top, TopAdd{Template: id, Minute: minute, Refused: tp.refused.counts(), Granted: tp.granted.counts()})
	}
	return b
}

// top keeps the k largest of the counts offered, a larger count first and
// then the name first in order: a heap whose root is the last of those
// kept, so that a count that does not make it costs one comparison.
type top struct {
	k  int
	es []topEntry
}

type topEntry struct {
	name string
	n    int64
}

// before reports whether a comes before b in the top's order.
func (a topEntry) before(b topEntry) bool {
	return a.n > b.n || a.n == b.n && a.name < b.name
}

// offer adds name's count n (nothing when n is 0).
func (t *top) offer(name string, n int64) {
	if n == 0 || t.k <= 0 {
		return
	}
	e := topEntry{name, n}
	if len(t.es) < t.k {
		t.es = append(t.es, e)
		for i := len(t.es) - 1; i > 0; { // up, while it comes after its parent
			p := (i - 1) / 2
			if !t.es[p].before(e) {
				break
			}
			t.es[i], t.es[p] = t.es[p], t.es[i]
			i = p
		}
		return
	}
	if !e.before(t.es[0]) {
		return
	}
	t.es[0] = e
	for i := 0; ; { // down, while a child comes after it
		last, l, r := i, 2*i+1, 2*i+2
		if l < len(t.es) && t.es[last].before(t.es[l]) {
			last = l
		}
		if r < len(t.es) && t.es[last].before(t.es[r]) {
			last = r
		}
		if last == i {
			break
		}
		t.es[i], t.es[last] = t.es[last], t.es[i]
		i = last
	}
}

// counts is the top kept, name → count.
func (t *top) counts() map[string]int64 {
	out := make(map[string]int64, len(t.es))
	for _, e := range t.es {
		out[e.name] = e.n
	}
	return out
}

// putBack adds iv's counts into the current interval.
func (t *Tally) putBack(iv interval) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var dropped int64
	// A template's counts go back whole, its instances' by name only:
	// instance counts are part of their template's already.
	for id, x := range iv.templates {
		dropped += t.cur.add(limitd.Subject{Template: id}, *x, t.maxNames)
	}
	for _, x := range iv.names {
		if x.template == "" {
			dropped += t.cur.addNamed(t.cur.limiters, x.name, "", x.Counts, t.maxNames)
		} else {
			dropped += t.cur.addNamed(t.cur.instances, x.name, x.template, x.Counts, t.maxNames)
		}
	}
	t.overflow.Add(dropped)
}
