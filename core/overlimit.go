package core

import (
	"sync"
	"time"

	"github.com/limitd/limitd"
)

// MaxOverLimitCache bounds Options.OverLimitCache as limitd's configuration
// takes it: each entry holds its counter's name and about 200 bytes.
const MaxOverLimitCache = 1_000_000

// The over-limit cache (Options.OverLimitCache; docs/envoy.md says what it
// answers): an entry maps the instant Redis said the counter stays over
// until onto the local monotonic clock from the time the call was sent,
// which falls at or before that instant (Redis decided after the call was
// sent), so that an entry never outlives the over state it remembers.

// overLimit is the cache: at most max entries, the oldest dropped first
// (every window of one rule is as long, so the oldest ends first).
type overLimit struct {
	mu      sync.Mutex
	max     int
	entries map[string]overEntry
	ring    []string // names in the order they were put, a ring of max
	next    int      // where the next name goes in ring
}

// overEntry is what a cached answer tells; until (local, monotonic) is
// when it ends, at the local time the call was sent.
type overEntry struct {
	until, at       time.Time
	limit, used     int64
	reset, redisNow int64           // Redis ns
	d               limitd.Decision // its Instance and Version name the limiter
	slot            int             // its place in ring
}

func newOverLimit(n int) *overLimit {
	if n <= 0 {
		return nil
	}
	return &overLimit{max: n, entries: make(map[string]overEntry, min(n, 4096)), ring: make([]string, n)}
}

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

// put remembers name as over until e.until; a new name takes the place of
// the oldest when the cache is full.
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

func (c *overLimit) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
	clear(c.ring)
	c.next = 0
}

// count is a cached counter's Count at now (local), Redis' time estimated
// from the decision's (never behind Redis').
func (e overEntry) count(now time.Time) Count {
	return Count{Over: true, Window: true, Limit: e.limit, Used: e.used, Reset: e.reset,
		Now: e.redisNow + int64(now.Sub(e.at))}
}

// ClearOverLimit empties the over-limit cache: a front end whose rules
// change calls it, so that no answer outlives the rule that made it.
func (s *Service) ClearOverLimit() {
	if s.over != nil {
		s.over.clear()
	}
}

func (s *Service) forgetOver(name string) {
	if s.over != nil {
		s.over.forget(name)
	}
}
