package client

import (
	"context"
	"math"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

// Fallback: what a handle does while the shared schedule is unreachable, and
// how that counts against the schedule once it answers again; the promise is
// FallbackSafe's, told in full in docs/reliability.md. The fallback's own
// permits start after the end of the schedule its last grant showed, not
// after this process's part of it: the processes' parts of a queue come in
// runs (each process's waiting callers ask again together), so one process's
// part may end a second before another's.

// guard paces a handle at its safe rate while it falls back and cools down.
type guard struct {
	slice  int64 // local ns per permit at the safe rate, rounded up
	next   int64 // local ns at which the next permit may start
	from   int64 // local ns before which no fallback permit starts (see goDown)
	until  int64 // local ns at which the cool-down ends; 0 while down
	back   int64 // local ns at which the handle came back; 0 while down
	given  int64 // fallback permits handed out since the handle went down
	passed int64 // the latest slot a caller passed the gate at
	// withdrawn is closed when the handle comes back: callers waiting for a
	// fallback permit queue on the schedule instead.
	withdrawn chan struct{}
}

// take places a permit at or after at and returns its start.
func (g *guard) take(at int64) int64 {
	s := max(at, g.next)
	g.next = s + g.slice
	return s
}

// ungive takes back the slot at s of a wait on g that was cancelled, if g
// is still in force and no slot was placed after it (else its time stays
// taken).
func (l *Limiter) ungive(g *guard, s int64) {
	l.mu.Lock()
	if l.guard == g && g.next == s+g.slice {
		g.next = s
	}
	l.mu.Unlock()
}

// coolFor is how long a handle that came back keeps pacing at its safe
// rate: two retry intervals, so that the other processes are back too.
func (l *Limiter) coolFor() int64 {
	return int64(max(2*l.o.retry, time.Second))
}

// safeRate is the fallback's rate: WithSafeRate, else this process's part
// of the shared rate as measured (schedPart), less partMargin, else, before
// two grants, the whole rate; 0 before the handle knows any rate.
func (l *Limiter) safeRate() float64 {
	if l.o.safeRate > 0 {
		return l.o.safeRate
	}
	if part := l.part.part(); part > 0 {
		return l.rate * part * (1 - partMargin)
	}
	return l.rate
}

// partMargin is what a fallback leaves of its process's measured part of
// the rate: each process measures its part alone while the parts move, and
// their sum came to 1.02–1.06 (TestFallbackNeverStacks).
const partMargin = 0.05

// reach is the latest start of a permit that the handle has handed out or
// holds from the shared schedule (local ns).
func (l *Limiter) reach() int64 {
	h := l.horizon
	for _, b := range l.blocks {
		if b.left() > 0 {
			h = max(h, b.lastStart())
		}
	}
	for _, s := range l.back {
		h = max(h, s.start)
	}
	return h
}

// goDown switches to the fallback until a retry succeeds: a call sent at
// local time sent failed at now. The pool's permits stay: they were
// granted, and are dispensed first.
func (l *Limiter) goDown(sent, now int64) {
	l.mayChange()
	if !l.down {
		l.down = true
		if rate := l.safeRate(); rate > 0 && l.o.fallback == FallbackSafe {
			slice := int64(math.Ceil(1e9 / max(rate, limiter.MinRate)))
			if l.guard == nil { // else still cooling down: it goes on from there
				l.guard = &guard{}
			}
			g := l.guard
			g.slice, g.until, g.back, g.given = slice, 0, 0, 0
			g.next = max(g.next, now)
			g.from = max(l.reach()+slice, l.schedEnd, sent+l.schedLead)
			g.withdrawn = make(chan struct{})
		}
		l.retryStep = min(int64(l.o.retry), int64(firstRetry))
		if !l.retrying {
			l.retrying = true
			quit := l.quitting()
			l.bg.Go(func() { l.retryLoop(quit) })
		}
	} else {
		l.retryStep = min(2*l.retryStep, int64(l.o.retry))
	}
	l.retryAt = now + l.retryStep
}

// retryLoop tries the schedule again whenever a retry is due while the
// handle is down, so that it comes back even when no caller comes by (all
// asleep on fallback permits). Callers start retries too (retryInBackground).
func (l *Limiter) retryLoop(quit chan struct{}) {
	for {
		l.mu.Lock()
		if !l.down || l.closed {
			l.retrying = false
			l.mu.Unlock()
			return
		}
		now := l.c.mono()
		l.retryInBackground(now)
		fetching, d := l.fetching, time.Duration(l.retryAt-now)
		l.mu.Unlock()
		if fetching != nil { // the retry in flight ends first
			select {
			case <-fetching:
			case <-quit:
			}
			continue
		}
		t := l.c.o.clock.NewTimer(max(d, time.Millisecond))
		select {
		case <-t.C():
		case <-quit:
			t.Stop()
		}
	}
}

// quitting is closed when the handle closes (l.mu held).
func (l *Limiter) quitting() chan struct{} {
	if l.quit == nil {
		l.quit = make(chan struct{})
	}
	return l.quit
}

// firstRetry is how soon a handle that fell back first tries the schedule
// again; each failed try doubles the delay, up to the retry interval, so
// that a blip ends its fallback within milliseconds.
const firstRetry = 50 * time.Millisecond

// comeBack ends the fallback: g was just granted, at local time now. The
// fallback's permits that have not started are withdrawn, those that have
// are charged against an unpaced schedule's backlog, and the guard paces
// the handle until the end of the cool-down.
func (l *Limiter) comeBack(now int64, g limitd.Grant, p limiter.Params) {
	l.down = false
	gd := l.guard
	if gd == nil {
		return
	}
	if gd.withdrawn != nil {
		close(gd.withdrawn)
	}
	gd.withdrawn, gd.from = nil, 0
	// Withdrawn, the fallback's slots ahead are free again: the pace
	// resumes after what the handle has from the schedule, and after the
	// callers that passed the gate before it went down.
	gd.next = max(now, l.reach()+gd.slice, gd.passed+gd.slice)
	gd.until, gd.back = now+l.coolFor(), now
	past := gd.given
	gd.given = 0
	// An unpaced schedule hands its backlog, which the fallback's permits
	// used, out again at once (see the top of this file for the others).
	ch, ok := l.c.t.(charger)
	if !ok || past == 0 || !math.IsInf(p.Burst, 1) || g.Wait <= 0 {
		return
	}
	n := min(past, int64(float64(g.Wait)/p.Slice.Float()))
	if n <= 0 {
		return
	}
	l.bg.Go(func() {
		ctx, cancel := context.WithTimeout(l.c.ctx, 2*time.Second)
		defer cancel()
		l.remoteCalls.Add(1)
		_, _ = ch.Charge(ctx, l.name, n) // lost: the backlog is caught up at the burst ratio, as any idle time
	})
}

// gate is when the guard lets the next permit of the pool start (l.mu
// held): 0 when there is no guard; the guard is dropped once its cool-down
// is over. A caller passes the gate before it takes from the pool: permits
// taken early and started late would overlap the schedule's later ones once
// the guard is gone.
func (l *Limiter) gate(now int64) int64 {
	g := l.guard
	if g == nil || l.down { // down, the pool's permits come before the fallback's (goDown)
		return 0
	}
	if now >= g.until {
		l.guard = nil
		return 0
	}
	return max(g.next, 1)
}

// pass is a slot of a guard's gate that a caller passed.
type pass struct {
	g    *guard
	slot int64
}

// valid reports whether the pass still lets its caller take a permit at
// now: of the guard g in force, and within one of its slices after the
// slot. One that waited longer (for a grant, say) passes again, or callers
// that passed meanwhile would all start at once.
func (p pass) valid(g *guard, now int64) bool {
	return p.g != nil && p.g == g && now-p.slot <= max(g.slice, int64(time.Millisecond))
}

// passGate takes the guard's next slot for a Wait and sleeps until it (l.mu held; unlocks).
func (l *Limiter) passGate(ctx context.Context, now int64) (pass, error) {
	g := l.guard
	if dl, has := ctx.Deadline(); has && l.c.o.clock.Now().Add(time.Duration(max(now, g.next)-now)).After(dl) {
		l.mu.Unlock()
		return pass{}, limiter.ErrDeadline
	}
	slot := g.take(now)
	g.passed = slot
	l.mu.Unlock()
	if err := l.c.sleep(ctx, time.Duration(slot-now)); err != nil {
		l.ungive(g, slot)
		return pass{}, err
	}
	return pass{g: g, slot: slot}, nil
}

// fallbackNext is peek while falling back: the next retry for a refusing
// fallback, the next slot of the guard for the safe one.
func (l *Limiter) fallbackNext(allowed bool, now int64) time.Duration {
	switch {
	case l.o.fallback == FallbackOptimistic:
		return 0
	case l.o.fallback == FallbackPessimistic || l.guard == nil:
		return time.Duration(max(0, l.retryAt-now))
	}
	return time.Duration(max(0, l.guard.next-now, l.guard.from-now))
}

// retryInBackground tries Redis again once per retry interval while the
// fallback serves callers; a successful grant ends the fallback.
func (l *Limiter) retryInBackground(now int64) {
	if now >= l.retryAt && l.fetching == nil {
		l.retryAt = now + l.retryStep
		l.startFetch(now)
	}
}

// fallbackAllow is Allow while falling back with an empty pool (l.mu held).
func (l *Limiter) fallbackAllow(now int64) bool {
	ok := false
	switch l.o.fallback {
	case FallbackOptimistic:
		ok = true
	case FallbackPessimistic:
	default:
		// No rate known yet: refuse.
		if g := l.guard; g != nil && max(g.next, g.from) <= now {
			g.take(now)
			g.given++
			ok = true
		}
	}
	if ok {
		l.mayChange()
		l.fallbackPermits.Add(1)
	}
	return ok
}

// fallbackWait is Wait while falling back with an empty pool (l.mu held;
// releases it). A caller that has just passed the guard's gate has its slot:
// it starts now, if the fallback may start yet. again is true when the
// handle came back before the permit started: the caller queues on the
// schedule instead.
func (l *Limiter) fallbackWait(ctx context.Context, now int64, gated bool) (p Permit, again bool, err error) {
	switch l.o.fallback {
	case FallbackOptimistic:
		l.mu.Unlock()
		t := l.c.o.clock.Now()
		l.fallbackPermits.Add(1)
		return Permit{Scheduled: t, Start: t}, false, nil
	case FallbackPessimistic:
		l.mu.Unlock()
		return Permit{}, false, limiter.ErrUnavailable
	}
	g := l.guard
	if g == nil { // no rate was ever learned and none configured: nothing is safe
		l.mu.Unlock()
		return Permit{}, false, limiter.ErrUnavailable
	}
	at := max(now, g.from)
	gated = gated && at == now
	if dl, has := ctx.Deadline(); has && !gated && l.c.o.clock.Now().Add(time.Duration(max(at, g.next)-now)).After(dl) {
		l.mu.Unlock()
		l.refused.one()
		return Permit{}, false, limiter.ErrDeadline
	}
	slot := now
	if !gated {
		slot = g.take(at)
	}
	withdrawn := g.withdrawn
	l.mayChange()
	off := l.offset
	if off == 0 { // no grant yet: the local clock stands in for Redis's
		off = l.c.base.UnixNano()
	}
	l.mu.Unlock()
	got := now
	if slot > now {
		t := l.c.o.clock.NewTimer(time.Duration(slot - now))
		select {
		case <-t.C():
		case <-withdrawn:
			t.Stop()
			return Permit{}, true, nil
		case <-ctx.Done():
			t.Stop()
			l.ungive(g, slot)
			return Permit{}, false, ctx.Err()
		}
		got = max(l.c.mono(), slot)
	}
	l.mu.Lock()
	if l.guard != g || g.withdrawn != withdrawn {
		// Back before this caller got here: its permit is the schedule's
		// to give now, and the fallback's count (charged) stays exact.
		l.mu.Unlock()
		return Permit{}, true, nil
	}
	g.given++
	l.mu.Unlock()
	l.fallbackPermits.Add(1)
	return Permit{Scheduled: time.Unix(0, slot+off), Start: time.Unix(0, got+off), Lateness: time.Duration(got - slot)}, false, nil
}

// schedPart estimates the part of a shared schedule this process takes, the
// fallback's safe rate as a fraction of the shared rate, from the process's
// own grants: each shows how far the schedule's end moved since the
// process's previous grant (its own permits and everyone else's) and how
// much of that was its own.
//
// A process's grants come in runs: its callers, all waiting, ask again when
// their permits come up, so on a queued schedule each process takes a run of
// it in turn. A ratio over a window of schedule then depends on where the
// window's edges fall among the runs (the processes' estimates added up to
// 1.04–1.08 over two-second windows), and so would their fallbacks' rates.
// So the part is smoothed twice in a row, each time exponentially over
// schedule time with the time constant partTau, which damps a period of two
// seconds to about 2 % of its swing; early on it is normalised by what the
// smoothing has seen so far.
type schedPart struct {
	end  int64   // the schedule's end after the last grant (Redis ns); 0: none yet
	y, z float64 // the part smoothed once, and twice
	span float64 // schedule ns observed since the first grant
}

// partTau is the time constant of schedPart's smoothing, in schedule time.
const partTau = float64(2 * time.Second)

// add records a grant that took cost ns of the schedule and left its end at end.
func (s *schedPart) add(end, cost int64) {
	if s.end == 0 {
		s.end = end // where the measure starts: nothing is known of the others yet
		return
	}
	// The schedule moved by at least this grant (less: it was rewound, by a
	// hand-back or a lost state).
	dt := float64(max(end-s.end, cost))
	s.end = end
	e := math.Exp(-dt / partTau)
	s.z = s.z*e + s.y*(dt/partTau)*e // z follows y, which decays meanwhile
	s.y = s.y*e + float64(cost)/partTau
	s.span += dt
}

// pause keeps the estimate as it is until the grant after next: the next
// grant shows where the schedule's end stands, the one after how far it
// moved since.
func (s *schedPart) pause() { s.end = 0 }

// part is the estimate, between 0 and 1; 0 before two grants.
func (s *schedPart) part() float64 {
	if s.span <= 0 {
		return 0
	}
	x := s.span / partTau
	// What each smoothing of a part of 1 would read after x: the estimates
	// are divided by it.
	n1 := -math.Expm1(-x)
	n2 := n1 - x*math.Exp(-x)
	if x < 1 || n2 <= 0 {
		return min(1, s.y/n1) // early: once smoothed, a plain ratio at first
	}
	return min(1, s.z/n2)
}
