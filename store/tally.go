package store

import (
	"cmp"
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd"
)

// Tally counts decisions in memory and adds them to the Redis totals
// (AddTotals) when flushed, about once a second: the one way every process
// that decides (a limitd server's ledger, a Go client over Redis) writes
// them. It is safe for concurrent use; the caller owns the loop that flushes
// it.
//
// A flush is one pipeline whose size depends on the named limiters and
// templates counted in the interval, not on the decisions nor the instances:
// an instance has no totals of its own, only its template's and a place in
// its template's top TopK instances by refused and by granted permits.
//
// At most MaxNames distinct limiters and instances are counted per interval
// (the first to come, across all shards); past that, a decision on a new
// name counts in its template's totals only, and in Overflow. The counts are
// held in shards, a name in the one its hash picks, so that decisions on
// different names do not wait on one mutex.
type Tally struct {
	st     *Store
	topK   int
	clock  func() time.Time
	seed   maphash.Seed
	room   room
	shards []tallyShard // a power of two

	overflow atomic.Int64
	failed   atomic.Int64
}

type tallyShard struct {
	mu    sync.Mutex
	cur   interval
	spare interval // the interval flushed last, emptied for the next one
	_     [64]byte // another shard's mutex on another cache line
}

// room is the MaxNames places for names in the current interval, across
// shards; a new interval gives them all back.
type room struct {
	max   int64
	taken atomic.Int64
}

// take returns the next place (1 for the first), ok false when none is
// left: the places taken are exactly 1 to max, in the order taken.
func (r *room) take() (seq int64, ok bool) {
	if r.taken.Load() >= r.max {
		return 0, false // full: no write to the shared counter
	}
	seq = r.taken.Add(1)
	return seq, seq <= r.max
}

// tallyShards: enough that 16 or 64 goroutines deciding at once seldom meet
// on one, few enough that a flush locks them all at no cost.
const tallyShards = 16

// TallyOptions configure a Tally; zero values take the defaults.
type TallyOptions struct {
	MaxNames int              // distinct limiters and instances per interval; default 10,000
	TopK     int              // top entries per template, by refused and by granted, per flush; default 100
	Clock    func() time.Time // picks a flush's minute bucket; default time.Now
}

// interval is one interval's counts (of a shard): values in one slice, which
// the maps index, two intervals taking turns (tallyShard.spare), so that a
// new name allocates nothing (docs/performance.md, "What the ledger costs").
type interval struct {
	limiters  map[string]int32 // name → index in names
	instances map[string]int32 // name → index in names
	names     []named
	templates map[string]*limitd.Counts // few: a template's totals
}

// named is the counts of a limiter (template "") or of an instance of
// template; seq is its place (room.take).
type named struct {
	name, template string
	seq            int64
	limitd.Counts
}

func newInterval() interval {
	return interval{limiters: map[string]int32{}, instances: map[string]int32{}, templates: map[string]*limitd.Counts{}}
}

func (t *interval) reset() {
	clear(t.limiters)
	clear(t.instances)
	clear(t.templates)
	clear(t.names) // let go of the names' strings
	t.names = t.names[:0]
}

func (t *interval) empty() bool { return len(t.names) == 0 && len(t.templates) == 0 }

// NewTally returns a tally that adds to s's Redis.
func (s *Store) NewTally(o TallyOptions) *Tally { return s.newTally(o, tallyShards) }

// newTally is NewTally with n shards (a power of two).
func (s *Store) newTally(o TallyOptions, n int) *Tally {
	t := &Tally{st: s, topK: cmp.Or(max(o.TopK, 0), 100), clock: o.Clock, seed: maphash.MakeSeed(),
		room: room{max: cmp.Or(max(int64(o.MaxNames), 0), 10_000)}, shards: make([]tallyShard, n)}
	if t.clock == nil {
		t.clock = time.Now
	}
	for i := range t.shards {
		t.shards[i].cur = newInterval()
	}
	return t
}

// shard is the shard that counts s: by its limiter's name, else its
// instance's, else its template's.
func (t *Tally) shard(s limitd.Subject) *tallyShard {
	if len(t.shards) == 1 {
		return &t.shards[0]
	}
	name := s.Limiter
	if name == "" {
		name = cmp.Or(s.Instance, s.Template)
	}
	return &t.shards[maphash.String(t.seed, name)&uint64(len(t.shards)-1)]
}

// lockAll locks every shard and returns what unlocks them.
func (t *Tally) lockAll() (unlock func()) {
	for i := range t.shards {
		t.shards[i].mu.Lock()
	}
	return func() {
		for i := range t.shards {
			t.shards[i].mu.Unlock()
		}
	}
}

// Add counts c under s (nothing when s names neither a limiter nor a
// template).
func (t *Tally) Add(s limitd.Subject, c limitd.Counts) {
	if c.IsZero() {
		return
	}
	sh := t.shard(s)
	sh.mu.Lock()
	dropped := sh.cur.add(s, c, &t.room)
	sh.mu.Unlock()
	if dropped != 0 {
		t.overflow.Add(dropped)
	}
}

// add counts c under s and returns the calls not counted under their own
// name for want of room.
func (t *interval) add(s limitd.Subject, c limitd.Counts, r *room) (dropped int64) {
	switch {
	case s.Limiter != "":
		return t.addNamed(t.limiters, s.Limiter, "", c, r)
	case s.Template != "":
		x := t.templates[s.Template]
		if x == nil {
			x = &limitd.Counts{}
			t.templates[s.Template] = x
		}
		x.Add(c)
		if s.Instance != "" {
			return t.addNamed(t.instances, s.Instance, s.Template, c, r)
		}
	}
	return 0
}

// addNamed counts c under name in m (t.limiters, or t.instances of template).
func (t *interval) addNamed(m map[string]int32, name, template string, c limitd.Counts, r *room) (dropped int64) {
	if i, ok := m[name]; ok {
		t.names[i].Add(c)
		return 0
	}
	seq, ok := r.take()
	if !ok {
		return c.GrantedCalls + c.RefusedCalls
	}
	m[name] = int32(len(t.names))
	t.names = append(t.names, named{name: name, template: template, seq: seq, Counts: c})
	return 0
}

// Overflow is how many decisions were not counted under their own name
// because the interval had MaxNames names already.
func (t *Tally) Overflow() int64 { return t.overflow.Load() }

// Flush adds what was counted since the last flush to Redis and starts a
// new interval. When Redis does not take it, the counts go back into the
// new interval (as far as MaxNames allows) and the error is returned.
func (t *Tally) Flush(ctx context.Context) error {
	ivs, empty := t.swap()
	var err error
	if !empty {
		err = t.st.AddTotals(ctx, batchOf(ivs, t.clock().UnixNano()/int64(time.Minute), t.topK))
		if err != nil {
			t.failed.Add(1)
			t.putBack(ivs)
		}
	}
	for i := range ivs {
		ivs[i].reset()
	}
	unlock := t.lockAll()
	for i := range t.shards {
		if sh := &t.shards[i]; sh.spare.limiters == nil {
			sh.spare = ivs[i]
		}
	}
	unlock()
	return err
}

// swap starts a new interval in every shard at once and returns the last
// ones and whether they counted nothing.
func (t *Tally) swap() (ivs []interval, empty bool) {
	ivs, empty = make([]interval, len(t.shards)), true
	defer t.lockAll()()
	for i := range t.shards {
		sh := &t.shards[i]
		ivs[i] = sh.cur
		sh.cur, sh.spare = sh.spare, interval{}
		if sh.cur.limiters == nil {
			sh.cur = newInterval()
		}
		empty = empty && ivs[i].empty()
	}
	t.room.taken.Store(0)
	return ivs, empty
}

// batchOf is a flush's intervals as the store adds them.
func batchOf(ivs []interval, minute int64, topK int) TotalsBatch {
	var nl, nt int
	for _, iv := range ivs {
		nl, nt = nl+len(iv.limiters), max(nt, len(iv.templates))
	}
	b := TotalsBatch{Limiters: make(map[string]limitd.Counts, nl), Templates: make(map[string]limitd.Counts, nt)}
	type tops struct{ refused, granted top }
	byTemplate := map[string]*tops{}
	for _, iv := range ivs {
		for id, c := range iv.templates {
			x := b.Templates[id]
			x.Add(*c)
			b.Templates[id] = x
		}
		for i := range iv.names {
			x := &iv.names[i]
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
	}
	for id, tp := range byTemplate {
		b.Top = append(b.Top, TopAdd{Template: id, Minute: minute, Refused: tp.refused.counts(), Granted: tp.granted.counts()})
	}
	return b
}

// top keeps the k largest counts offered, a larger count first and then the
// name first: a heap whose root is the last of those kept, so that a count
// that does not make it costs one comparison.
type top struct {
	k  int
	es []topEntry
}

type topEntry struct {
	name string
	n    int64
}

func (a topEntry) before(b topEntry) bool {
	return a.n > b.n || a.n == b.n && a.name < b.name
}

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

func (t *top) counts() map[string]int64 {
	out := make(map[string]int64, len(t.es))
	for _, e := range t.es {
		out[e.name] = e.n
	}
	return out
}

// putBack adds the counts of ivs (a flush's shards) into the current
// interval, the names in the order they came, as far as MaxNames allows.
func (t *Tally) putBack(ivs []interval) {
	defer t.lockAll()()
	var dropped int64
	// A template's counts go back whole, its instances' by name only:
	// instance counts are part of their template's already.
	var names []*named
	for i := range ivs {
		for id, x := range ivs[i].templates {
			dropped += t.shards[i].cur.add(limitd.Subject{Template: id}, *x, &t.room)
		}
		for j := range ivs[i].names {
			names = append(names, &ivs[i].names[j])
		}
	}
	slices.SortFunc(names, func(a, b *named) int { return cmp.Compare(a.seq, b.seq) })
	for _, x := range names {
		cur := &t.shard(limitd.Subject{Limiter: x.name}).cur // an instance's shard is by its name too
		m := cur.limiters
		if x.template != "" {
			m = cur.instances
		}
		dropped += cur.addNamed(m, x.name, x.template, x.Counts, &t.room)
	}
	t.overflow.Add(dropped)
}
