package core

import (
	"sync"
	"time"

	"github.com/limitd/limitd"
)

// MaxOverLimitCache bounds Options.OverLimitCache as limitd's configuration
// takes it: each entry holds its counter's name and about 200 bytes.
const MaxOverLimitCache = 1_000_000

// The over-limit cache (Options.OverLimitCache; under CountStrict see
// countStrict, count.go): under CountEvery, a window
// counter found over its limit answers every later call with hits "over"
// without Redis until it could grant again, as the Envoy reference server's
// local cache of keys over their limit does (its LOCAL_CACHE_SIZE_IN_BYTES).
//
// Exactly: a fixed window's count only grows until its window ends, so a
// counter that was over stays over until then; Redis says when (the
// counter's delay after the charge: until its window's end, or for a
// sliding window until one permit fits again). The cache maps that instant
// onto the local monotonic clock conservatively, from the local time the
// call was sent: sent + (that instant − Redis' time of the decision), which
// falls at or before the instant itself (Redis decided after the call was
// sent), so an entry never outlives the over state it remembers. A check (0
// hits) is always asked of Redis: a sliding window's weight may let it pass
// sooner.
//
// Hits it answers are not counted (the reference does not increment the
// keys in its cache either): the counter's count in Redis stays where the
// last counted call left it. A reset or delete of the counter through this
// service drops its entry (forgetOver). What the cache cannot see: a reset
// through another process, or a limit raised through the API, takes effect
// for a cached counter only when its entry ends (at the latest at its
// window's end); rules reloaded by a front end clear it (ClearOverLimit).

// overLimit is the cache: at most max entries, the oldest dropped first.
// Every window of one rule is as long, so the oldest entry ends first.
type overLimit struct {
	mu      sync.Mutex
	max     int
	entries map[string]overEntry
	ring    []string // names in the order they were put, a ring of max
	next    int      // where the next name goes in ring
}

// overEntry is what a cached answer tells: the counter's limit, its count
// when it was last counted, when its window resets (Redis ns) and the
// Redis time of that decision; until (local, monotonic) is when the entry
// ends, and at the local time the call was sent.
type overEntry struct {
	until, at       time.Time
	limit, used     int64
	reset, redisNow int64
	// d is what of the decision names the limiter (its Instance and
	// Version: limiterShadow's and report's).
	d    limitd.Decision
	slot int // its place in ring
}

func newOverLimit(n int) *overLimit {
	if n <= 0 {
		return nil
	}
	return &overLimit{max: n, entries: make(map[string]overEntry, min(n, 4096)), ring: make([]string, n)}
}

// get returns name's entry if it is over at now (local).
func (c *overLimit) get(name string, now time.Time) (overEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[name]
	if !ok {
		return overEntry{}, false
	}
	if !now.Before(e.until) {
		delete(c.entries, name)
		return overEntry{}, false
	}
	return e, true
}

// put remembers name as over until e.until, replacing an entry it had;
// a new name takes the place of the oldest when the cache is full.
func (c *overLimit) put(name string, e overEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[name]; ok {
		e.slot = old.slot
		c.entries[name] = e
		return
	}
	if old := c.ring[c.next]; old != "" {
		if o, ok := c.entries[old]; ok && o.slot == c.next {
			delete(c.entries, old)
		}
	}
	e.slot = c.next
	c.ring[c.next] = name
	c.entries[name] = e
	c.next = (c.next + 1) % c.max
}

// forget drops name's entry (its ring slot is reused in turn: put checks
// that a slot's entry is still its own).
func (c *overLimit) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, name)
}

// clear empties the cache.
func (c *overLimit) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
	clear(c.ring)
	c.next = 0
}

// count is a cached counter's Count at now (local): over, not counted, its
// window's limit and reset, and Redis' time estimated from the decision's
// (the time passed since the call was sent: never behind Redis').
func (e overEntry) count(now time.Time) Count {
	return Count{Over: true, Window: true, Limit: e.limit, Used: e.used, Reset: e.reset,
		Now: e.redisNow + int64(now.Sub(e.at))}
}

// ClearOverLimit empties the over-limit cache (Options.OverLimitCache): a
// front end whose rules change calls it, so that no answer outlives the
// rule that made it.
func (s *Service) ClearOverLimit() {
	if s.over != nil {
		s.over.clear()
	}
}

// forgetOver drops name from the over-limit cache: it was reset or deleted.
func (s *Service) forgetOver(name string) {
	if s.over != nil {
		s.over.forget(name)
	}
}
