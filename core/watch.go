package core

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limitd/limitd"
)

// Watcher is the one sampler of a process: while Run runs it reads every
// named limiter (the first MaxWatched in name order) and every name asked
// for with Watch once a Step, and derives each one's Signals once. Every
// reader of live signals takes them from it (event streams, /v1/history,
// /metrics), so a limiter is read once per Step however many readers there
// are. A round reads live states and totals in pipelines of WatchBatch,
// configs only after a change (Sampler), the list every relistRounds rounds
// and after a change, and the watched instances' templates' busiest sets.
type Watcher struct {
	s         *Service
	step      time.Duration
	max       int
	timeout   time.Duration
	newTicker func(time.Duration) Ticker

	poke chan struct{} // a name was watched (capacity 1)

	mu     sync.Mutex
	series map[string]*series
	extra  map[string]int // names watched, by how many watches
	last   *Round
	subs   map[chan *Round]struct{}
	chsubs map[chan Change]struct{}
}

// Ticker is what a Watcher's rounds follow: a time.Ticker, or in tests a
// channel they drive.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

type timeTicker struct{ t *time.Ticker }

func (t timeTicker) C() <-chan time.Time { return t.t.C }
func (t timeTicker) Stop()               { t.t.Stop() }

// WatcherOptions configure a Watcher; zero values take the defaults.
type WatcherOptions struct {
	Step    time.Duration              // between rounds; default 1 s
	Max     int                        // named limiters sampled, the first in name order; default MaxWatched
	Timeout time.Duration              // bounds one round's Redis work; default 5 s
	Ticker  func(time.Duration) Ticker // default a time.Ticker
}

const (
	MaxWatched = 1000 // named limiters sampled by default
	WatchBatch = 500  // limiters one pipeline of a round reads
	// relistRounds is how often the named limiters are listed again besides
	// after a published change (a change missed while Redis was away).
	relistRounds = 30
)

// NewWatcher returns a Watcher over s; it samples nothing until Run.
func (s *Service) NewWatcher(o WatcherOptions) *Watcher {
	w := &Watcher{s: s, step: positiveOr(o.Step, time.Second), max: positiveOr(o.Max, MaxWatched),
		timeout: positiveOr(o.Timeout, 5*time.Second), newTicker: o.Ticker,
		poke: make(chan struct{}, 1), series: map[string]*series{}, extra: map[string]int{},
		subs: map[chan *Round]struct{}{}, chsubs: map[chan Change]struct{}{}}
	if w.newTicker == nil {
		w.newTicker = func(d time.Duration) Ticker { return timeTicker{time.NewTicker(d)} }
	}
	return w
}

// Round is what one round read, never changed once published.
type Round struct {
	// N counts full rounds; a partial round (reading only names just
	// watched) carries the N of the full round before it.
	N    uint64
	Full bool
	// Listed is every named limiter sampled, in name order (nil while the
	// list could not be read yet).
	Listed  []string
	Entries map[string]Entry // every name's last read, listed or watched
	Err     error            // why Redis could not serve the round
}

// has reports whether r read name (r nil: no round yet).
func (r *Round) has(name string) bool {
	if r == nil {
		return false
	}
	_, ok := r.Entries[name]
	return ok
}

// Entry is one limiter's part of a round: its view and signals, or the
// error reading it answered (ErrNotFound: deleted).
type Entry struct {
	Limiter Limiter
	Signals Signals
	Err     error
}

// Watch adds names to those sampled each round, besides the named
// limiters listed; one not sampled yet is read at once (a partial round).
// The returned func takes them back.
func (w *Watcher) Watch(names []string) (unwatch func()) {
	names = slices.Clone(names)
	w.mu.Lock()
	fresh := false
	for _, n := range names {
		w.extra[n]++
		fresh = fresh || !w.last.has(n)
	}
	w.mu.Unlock()
	if fresh {
		select {
		case w.poke <- struct{}{}:
		default:
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, n := range names {
				if w.extra[n]--; w.extra[n] <= 0 {
					delete(w.extra, n)
				}
			}
		})
	}
}

// Subscribe returns a channel that receives every round from now on (a
// reader that falls behind gets the newest, rounds between skipped), and
// the func that ends the subscription.
func (w *Watcher) Subscribe() (<-chan *Round, func()) { return subscribe(&w.mu, w.subs, 1) }

// Changes returns a channel that receives the config changes Run's one
// subscription receives, with a buffer of 64: a change past it is dropped
// (the next round reads the limiter again anyway). The func ends it.
func (w *Watcher) Changes() (<-chan Change, func()) { return subscribe(&w.mu, w.chsubs, 64) }

// subscribe adds a channel with a buffer of n to subs (guarded by mu).
func subscribe[T any](mu *sync.Mutex, subs map[chan T]struct{}, n int) (<-chan T, func()) {
	ch := make(chan T, n)
	mu.Lock()
	subs[ch] = struct{}{}
	mu.Unlock()
	return ch, func() {
		mu.Lock()
		defer mu.Unlock()
		delete(subs, ch)
	}
}

// Last is the newest round, nil before the first.
func (w *Watcher) Last() *Round {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// History is each of names' samples, oldest first (empty for a name not
// sampled): rates, utilization, wait and health, without a Reading.
func (w *Watcher) History(names []string) map[string][]Signals {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]Signals, len(names))
	for _, n := range names {
		out[n] = []Signals{}
		if s, ok := w.series[n]; ok {
			out[n] = s.history()
		}
	}
	return out
}

// Run samples every Step until ctx ends, the first round at once. Run it
// once, in one goroutine.
func (w *Watcher) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := w.s.Changes(ctx)
	r := &watchRounds{w: w, sampler: w.s.Sampler()}
	tick := w.newTicker(w.step)
	defer tick.Stop()
	r.round(ctx, true)
	for {
		select {
		case <-ctx.Done():
			return
		case ch, open := <-changes:
			if open {
				r.sampler.Changed(ch.Limiter)
				r.relist = true
				w.mu.Lock()
				for sub := range w.chsubs {
					select {
					case sub <- ch:
					default:
					}
				}
				w.mu.Unlock()
			}
		case <-w.poke:
			r.round(ctx, false)
		case <-tick.C():
			r.round(ctx, true)
		}
	}
}

// watchRounds is Run's state, its goroutine's alone.
type watchRounds struct {
	w       *Watcher
	sampler *Sampler
	names   []string // the named limiters listed
	listed  bool
	relist  bool
	n       uint64 // full rounds
}

// round reads every name (full) or only the watched names not read yet,
// and publishes what it read.
func (r *watchRounds) round(ctx context.Context, full bool) {
	w := r.w
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	var failed error
	if full {
		r.n++
		// With no limiter listed, the list is what tells Redis is there.
		if !r.listed || len(r.names) == 0 || r.relist || r.n%relistRounds == 0 {
			page, err := w.s.List(ctx, "", w.max)
			if err == nil {
				r.names, r.relist, r.listed = r.names[:0], false, true
				for _, info := range page.Limiters {
					r.names = append(r.names, info.Name)
				}
			} else {
				failed = err
			}
		}
	}
	w.mu.Lock()
	prev := w.last
	var todo []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			todo = append(todo, n)
		}
	}
	if full {
		for _, n := range r.names {
			add(n)
		}
	}
	for n := range w.extra {
		if full || !prev.has(n) {
			add(n)
		}
	}
	w.mu.Unlock()
	if !full && len(todo) == 0 {
		return
	}

	entries := map[string]Entry{}
	var reads []string
	if failed == nil {
		for batch := range slices.Chunk(todo, WatchBatch) {
			ls, errs := r.sampler.GetAll(ctx, batch)
			for i, n := range batch {
				entries[n] = Entry{Limiter: ls[i], Err: errs[i]}
				switch err := errs[i]; {
				case err == nil:
					reads = append(reads, n)
				case errors.Is(err, ErrNotFound):
				default:
					if u, ok := UnavailabilityOf(err); !ok || !u.OneLimiter {
						failed = err
					}
				}
			}
		}
	}
	if ctx.Err() != nil && failed == nil {
		failed = ctx.Err()
	}
	instances := r.instanceCounts(ctx, entries, reads)

	w.mu.Lock()
	defer w.mu.Unlock()
	if full {
		gone := func(n string) bool { return errors.Is(entries[n].Err, ErrNotFound) }
		r.names = slices.DeleteFunc(r.names, gone)
		keep := map[string]bool{}
		for _, n := range r.names {
			keep[n] = true
		}
		for n := range w.extra {
			keep[n] = true
		}
		for n := range w.series {
			if !keep[n] || gone(n) {
				delete(w.series, n) // deleted, unwatched, or past the cap now
			}
		}
	} else if prev != nil {
		for n, e := range prev.Entries {
			if _, ok := entries[n]; !ok {
				entries[n] = e
			}
		}
	}
	for _, n := range reads {
		e := entries[n]
		s := w.series[n]
		if s == nil || s.kind != e.Limiter.Config.Kind {
			s = &series{kind: e.Limiter.Config.Kind}
			w.series[n] = s
		}
		sg, sm := s.signal(e.Limiter)
		if c, ok := instances[n]; ok {
			sg.Instance = &c
			sg.Health = healthOf(sg)
		}
		if sm.t > s.newest {
			s.newest = sm.t
			s.keep(sm)
		}
		e.Signals = sg
		entries[n] = e
	}
	round := &Round{N: r.n, Full: full, Entries: entries, Err: failed}
	if r.listed {
		round.Listed = slices.Clone(r.names)
	}
	if !full && prev != nil {
		round.Listed, round.Err = prev.Listed, prev.Err
	}
	w.last = round
	for ch := range w.subs {
		select {
		case ch <- round:
		default:
			select { // the reader is behind: it gets the newest
			case <-ch:
			default:
			}
			ch <- round
		}
	}
}

// instanceCounts reads the counts of the template instances among reads in
// their templates' busiest-instances sets, once per template.
func (r *watchRounds) instanceCounts(ctx context.Context, entries map[string]Entry, reads []string) map[string]InstanceCounts {
	byTemplate := map[string][]string{}
	for _, n := range reads {
		if id := entries[n].Limiter.Template; id != "" {
			byTemplate[id] = append(byTemplate[id], n)
		}
	}
	if len(byTemplate) == 0 {
		return nil
	}
	out := map[string]InstanceCounts{}
	for id, names := range byTemplate {
		found := map[string]limitd.TopInstance{}
		var since int64
		for _, by := range []string{"refused", "granted"} {
			top, err := r.w.s.Top(ctx, id, by, MaxTopLimit, InstanceMinutes)
			if err != nil {
				continue
			}
			since = top.Since
			for _, t := range top.Instances {
				if _, ok := found[t.Name]; !ok {
					found[t.Name] = t
				}
			}
		}
		for _, n := range names {
			c := InstanceCounts{Template: id, Since: since}
			if t, ok := found[n]; ok {
				c.Tracked, c.Granted, c.Refused = true, t.Granted, t.Refused
			}
			out[n] = c
		}
	}
	return out
}

// Sampler reads the same limiters again and again: it keeps each config
// and reads it again only when the version moved (Changed, or the live
// state answered another version) or the kind changed, so a sample reads
// the live states alone (Views). It is not safe for concurrent use.
type Sampler struct {
	s     *Service
	infos map[string]limitd.Info
}

// Sampler returns a Sampler that keeps nothing yet.
func (s *Service) Sampler() *Sampler { return &Sampler{s: s, infos: map[string]limitd.Info{}} }

// Changed forgets the config kept for name: a change to it was published.
func (p *Sampler) Changed(name string) { delete(p.infos, name) }

// GetAll is Service.Get for each of names: out[i] and errs[i] are names[i]'s.
func (p *Sampler) GetAll(ctx context.Context, names []string) (out []Limiter, errs []error) {
	out, errs = make([]Limiter, len(names)), make([]error, len(names))
	var kept []int
	var infos []limitd.Info
	for i, n := range names {
		if info, ok := p.infos[n]; ok {
			kept, infos = append(kept, i), append(infos, info)
		}
	}
	done := make([]bool, len(names))
	views, verrs := p.s.Views(ctx, infos)
	for j, i := range kept {
		l, err := views[j], verrs[j]
		switch {
		case err == nil && l.version() == infos[j].Version:
			out[i], done[i] = l, true
		case errors.Is(err, ErrNotFound):
			delete(p.infos, names[i])
			errs[i], done[i] = err, true
		case err != nil && !errors.Is(err, ErrConflict):
			errs[i], done[i] = err, true
		}
		// Otherwise another version, or another kind: read the config again.
	}
	for i, n := range names {
		if done[i] {
			continue
		}
		if out[i], errs[i] = p.s.Get(ctx, n); errs[i] != nil {
			delete(p.infos, n)
		} else {
			p.infos[n] = out[i].Info
		}
	}
	return out, errs
}

// version is the config version l's live state was read at.
func (l Limiter) version() int64 {
	if l.Holders != nil {
		return l.Holders.Version
	}
	return l.State.Version
}

// Change is one published config change: a limiter put or patched (its new
// version), deleted (Version 0), or the templates changed (Templates).
type Change struct {
	Limiter   string `json:"limiter,omitempty"`
	Version   int64  `json:"version"`
	Templates bool   `json:"templates,omitempty"`
}

// Changes delivers config changes as they are published until ctx ends,
// then closes. Changes published while Redis is unreachable are lost.
func (s *Service) Changes(ctx context.Context) <-chan Change {
	in := s.store.Changes(ctx)
	out := make(chan Change)
	go func() {
		defer close(out)
		for msg := range in {
			name, v, ok := strings.Cut(msg, " ")
			if !ok {
				continue
			}
			version, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			c := Change{Limiter: name, Version: version}
			if name == "*template*" {
				c = Change{Templates: true}
			}
			select {
			case out <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
