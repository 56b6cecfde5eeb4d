package client

import (
	"cmp"
	"slices"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

// block is one grant being dispensed: permit i is due at sched + cost(i) on
// the local clock and may start at max(that, start + pace(cost(i))).
type block struct {
	// What a permit changes, then what it reads: callers on every core take
	// permits from the same block.
	i      int64 // next permit
	cost   int64 // ns from the grant's first scheduled time to permit i
	rem    int64 // the carry after i permits
	pace   int64 // local pacing of late permits
	sched  int64 // local ns of the first permit's scheduled time
	start  int64 // local ns of the grant's start
	got    int64 // local ns when the grant arrived
	offset int64 // Redis ns − local ns, at the grant
	p      limiter.Params
	g      limitd.Grant
	// dropped: no longer in the pool (handed back, or lost with Redis). A
	// permit of it that a cancelled wait puts back cannot rejoin the pool.
	dropped bool
	lost    bool // dropped without a hand-back: the limiter it came from is gone
}

func (b *block) left() int64 { return b.g.Permits - b.i }

// lastStart is when the block's last permit may start (local ns), unpaced.
func (b *block) lastStart() int64 {
	c, _ := b.p.Slice.Cost(b.left()-1, b.rem)
	return max(b.sched+b.cost+c, b.start+b.p.PaceOf(b.cost+c))
}

// slot is one permit out of a block: its times, and where it came from, so
// that a permit put back by a cancelled wait can still be handed back.
type slot struct {
	sched, start, offset int64
	b                    *block
	idx                  int64 // the permit's index in its grant
	back                 bool  // it is l.back[0], which next returned
}

// next returns the next permit's times without taking it; ok is false when
// the pool is empty. Stale permits are dropped for hand-back on the way.
func (l *Limiter) next(now int64) (s slot, ok bool) {
	for len(l.back) > 0 {
		s := l.back[0]
		if now-max(s.start, s.b.got) <= l.staleAfter(s.b) {
			break
		}
		l.back = l.back[1:]
		if !l.down { // else Redis would not take it
			l.bg.Go(func() { _ = l.releaseOne(s.b.g) })
		}
	}
	for len(l.blocks) > 0 {
		b := l.blocks[0]
		if b.left() <= 0 {
			l.blocks = l.blocks[1:]
			continue
		}
		sched := b.sched + b.cost
		start := max(sched, b.start+b.p.PaceOf(b.cost))
		// Held too long (a stall): using these now would burst. Measured from
		// when the grant let the permit start, not when it was due (with a
		// backlog every permit is due in the past: every fresh grant would go
		// back), nor from before the grant arrived (a slow round trip would
		// make it stale on arrival).
		if now-max(start, b.got) > l.staleAfter(b) {
			l.blocks = l.blocks[1:]
			if l.down { // Redis would not take them: they are lost
				b.dropped, b.lost = true, true
			} else {
				l.handBack(b)
			}
			continue
		}
		if now-sched > l.bulkBound(b) {
			start = max(start, b.pace) // behind by more than op bulking allows: pace
		}
		return l.orBack(slot{sched: sched, start: start, offset: b.offset, b: b, idx: b.i}, true)
	}
	return l.orBack(slot{}, false)
}

// orBack returns the earlier of s and the first permit put back.
func (l *Limiter) orBack(s slot, ok bool) (slot, bool) {
	if len(l.back) > 0 && (!ok || l.back[0].sched < s.sched) {
		s = l.back[0]
		s.back = true
		return s, true
	}
	return s, ok
}

// staleAfter is how late a held permit may start before it is handed back
// instead: the stale option, but never less than the bulking bound, or a
// caller slower than a low rate would find each prefetched permit stale.
func (l *Limiter) staleAfter(b *block) int64 {
	return max(int64(l.o.stale), l.bulkBound(b))
}

// bulkBound is how late a permit may start without slowing the next ones:
// one grant window (at least 1ms and 2 slices), so that a goroutine waking a
// millisecond late does not lose its slot.
func (l *Limiter) bulkBound(b *block) int64 {
	return max(int64(l.o.window), int64(time.Millisecond), 2*b.p.Slice.Whole)
}

// take removes the permit next returned.
func (l *Limiter) take(s slot, now int64) {
	l.taken++
	l.sharedPermits++
	l.lastTake = max(l.lastTake, now)
	l.horizon = max(l.horizon, s.start, now)
	if s.back {
		l.back = l.back[1:]
		return
	}
	b := l.blocks[0]
	c, r := b.p.Slice.Cost(1, b.rem)
	b.cost, b.rem, b.i = b.cost+c, r, b.i+1
	// Late permits are paced at the burst ratio from the permit's start, but
	// from no earlier than one bulking bound before now: a worker that comes
	// late takes up to that much at once. (Pacing from now made each late
	// permit sleep a fraction of a slice, and a pool once behind stayed so.)
	b.pace = max(s.start, now-l.bulkBound(b)) + b.p.PaceOf(c)
	l.maybePrefetch(now)
}

// putBack returns the permit of a cancelled wait to the pool, where the next
// caller gets it. One the pool no longer dispenses (a dropped grant, a closed
// handle) goes back to the schedule.
func (l *Limiter) putBack(s slot) {
	l.mu.Lock()
	l.taken--
	switch {
	case s.b.lost:
		l.mu.Unlock()
		return
	case l.closed || s.b.dropped || s.b.g.Version < l.version:
		l.mu.Unlock()
		_ = l.releaseOne(s.b.g)
		return
	}
	s.back = false
	l.mayChange()
	i, _ := slices.BinarySearchFunc(l.back, s.sched, func(x slot, t int64) int { return cmp.Compare(x.sched, t) })
	l.back = slices.Insert(l.back, i, s)
	l.mu.Unlock()
}

// peek is how long until the pool's next permit may start; an empty pool
// (the next grant is on its way) counts one slice.
func (l *Limiter) peek(now int64) time.Duration {
	if s, ok := l.next(now); ok {
		return time.Duration(max(0, s.start-now, l.gate(now)-now))
	}
	if l.rate > 0 {
		return time.Duration(1e9 / l.rate)
	}
	return 0
}
