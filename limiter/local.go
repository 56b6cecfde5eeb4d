package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrDeadline is returned by Wait when the permit's start lies beyond the
// context's deadline; nothing is taken from the limiter then. It matches
// context.DeadlineExceeded too.
var ErrDeadline = fmt.Errorf("limiter: wait would exceed the context deadline: %w", context.DeadlineExceeded)

// Clock is the time source of a Limiter. Tests inject a fake one; the default
// uses the monotonic clock.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, returning ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock returns the machine's Clock: the monotonic clock and real
// timers. Every context-aware sleep in limitd is its Sleep or an injected
// Clock's.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock makes the limiter read time from c.
func WithClock(c Clock) Option { return func(l *Limiter) { l.clock = c } }

// Limiter is a goroutine-safe in-process limiter over one engine. It holds the
// same schedule a shared limiter holds in Redis, for one process.
//
// Most callers want Wait, which blocks until the permit's start and tells the
// caller when the permit was scheduled, so latency can be measured from the
// schedule rather than from when the caller got around to it. Allow decides
// without waiting; Reserve hands the waiting to the caller.
type Limiter struct {
	mu     sync.Mutex
	params Params
	state  State
	config Config
	clock  Clock
	sys    bool      // clock is the system's: read it with time.Since (one clock read, not two)
	base   time.Time // engine time 0; engine times are ns since base
	last   int64     // the latest engine time used
}

// New returns a limiter for a config of kind schedule or smooth.
func New(c Config, opts ...Option) (*Limiter, error) {
	p, err := Compile(c)
	if err != nil {
		return nil, err
	}
	norm, _, _ := c.Normalize()
	l := &Limiter{params: p, config: norm, clock: systemClock{}}
	for _, o := range opts {
		o(l)
	}
	_, l.sys = l.clock.(systemClock)
	l.base = l.clock.Now()
	if p.StartsAtCreation() {
		p.Start(&l.state, 0)
	}
	return l, nil
}

// Permit tells a caller what it got: when its permits were due on the schedule
// and when it may start.
type Permit struct {
	Permits   int
	Scheduled time.Time     // when the permits were due on the schedule
	Start     time.Time     // when the caller may start (never before the request)
	Lateness  time.Duration // Start − Scheduled: how far behind schedule it starts
	Backlog   time.Duration // the limiter's backlog after the grant
}

// now is the engine time now. The system clock is read with time.Since, which
// reads only the monotonic clock; Now reads the wall clock too.
func (l *Limiter) now() int64 {
	if l.sys {
		return int64(time.Since(l.base))
	}
	return int64(l.clock.Now().Sub(l.base))
}

// Allow reports whether one permit may start now.
func (l *Limiter) Allow() bool { return l.AllowN(1) }

// AllowN reports whether n permits may start now; if so they are taken.
// n outside [1, MaxPermits] is never allowed.
func (l *Limiter) AllowN(n int) bool {
	now := l.now()
	l.mu.Lock()
	ok := int64(n) >= 1 && int64(n) <= l.params.MaxPermits && // CheckPermits, without building its error
		l.params.acquire(&l.state, l.monotonic(now), int64(n), 0).Granted
	l.mu.Unlock()
	return ok
}

// Wait blocks until one permit may start. See WaitN.
func (l *Limiter) Wait(ctx context.Context) (Permit, error) { return l.WaitN(ctx, 1) }

// WaitN blocks until n permits may start, or ctx is done. If ctx has a deadline
// earlier than the start, it returns ErrDeadline at once and takes nothing. If
// ctx is cancelled while waiting, the permits are handed back.
func (l *Limiter) WaitN(ctx context.Context, n int) (Permit, error) {
	if err := ctx.Err(); err != nil {
		return Permit{}, err
	}
	dl, hasDeadline := ctx.Deadline()
	var r Reservation
	if err := l.reserve(&r, int64(n), dl, hasDeadline); err != nil {
		return Permit{}, err
	}
	if err := l.clock.Sleep(ctx, time.Duration(r.result.Delay)); err != nil {
		r.Cancel()
		return Permit{}, err
	}
	return r.Permit(), nil
}

// ErrTooLate is returned by Reserve when the permits' start lies beyond the
// horizon (about 13 days) of the schedule.
var ErrTooLate = errors.New("limiter: the permits' start lies beyond the schedule's horizon")

// Reservation is a grant the caller waits out itself, or cancels.
type Reservation struct {
	lim           *Limiter
	ok            bool
	result        Result
	before, after State
	at            time.Time
}

// Reserve takes n permits now, however far ahead they start, and returns the
// reservation: wait Delay() before starting, or Cancel() to hand them back.
func (l *Limiter) Reserve(n int) (*Reservation, error) {
	r := &Reservation{}
	if err := l.reserve(r, int64(n), time.Time{}, false); err != nil {
		return nil, err
	}
	return r, nil
}

// reserve fills r. The deadline, if any, is judged at the same instant the
// engine decides, under the lock.
func (l *Limiter) reserve(r *Reservation, n int64, deadline time.Time, hasDeadline bool) error {
	now := l.now() // read before locking: the clock is the slow part
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.params.CheckPermits(n); err != nil {
		return err
	}
	now = l.monotonic(now)
	maxWait := Forever
	if hasDeadline {
		maxWait = int64(deadline.Sub(l.base.Add(time.Duration(now))))
		if maxWait < 0 {
			return ErrDeadline
		}
	}
	*r = Reservation{lim: l, before: l.state}
	r.result = l.params.acquire(&l.state, now, n, maxWait)
	r.ok, r.after, r.at = r.result.Granted, l.state, l.base.Add(time.Duration(now))
	if !r.ok {
		if hasDeadline && r.result.Delay > maxWait {
			return ErrDeadline
		}
		return ErrTooLate
	}
	return nil
}

// monotonic returns the engine time of a decision, given a clock reading taken
// before the lock; called with l.mu held. A reading no later than the last
// decision's was overtaken on its way to the lock: another caller read the
// clock after it and decided first. Deciding at the old reading (or at the
// last decision's instant) would put this decision at or before one already
// made, where a schedule's pace, which keeps starts apart, refuses it although
// its caller came later; so the clock is read again, under the lock, which
// orders it after every earlier decision. Only a clock too coarse to tell the
// two apart leaves the decision at the last one's instant.
func (l *Limiter) monotonic(now int64) int64 {
	if now <= l.last {
		now = max(l.now(), l.last)
	}
	l.last = now
	return now
}

// OK reports whether the reservation holds permits. A nil reservation (what
// Reserve returns with an error) holds none, and its methods do nothing.
func (r *Reservation) OK() bool { return r != nil && r.ok }

// Delay is how long the caller must wait from now before starting.
func (r *Reservation) Delay() time.Duration {
	if !r.OK() {
		return 0
	}
	return max(0, r.at.Add(time.Duration(r.result.Delay)).Sub(r.lim.clock.Now()))
}

// Permit describes the reserved permits.
func (r *Reservation) Permit() Permit {
	if !r.OK() {
		return Permit{}
	}
	base, res := r.lim.base, r.result
	return Permit{
		Permits:   int(res.Permits),
		Scheduled: base.Add(time.Duration(res.Scheduled)),
		Start:     base.Add(time.Duration(res.Start)),
		Lateness:  time.Duration(res.Lateness),
		Backlog:   time.Duration(res.Wait),
	}
}

// Cancel hands the permits back: the schedule is rewound if nothing was taken
// after them, otherwise their time is counted as idle. Once their start has
// passed it does nothing, as the caller may have acted (x/time/rate does the
// same). Cancel is idempotent.
func (r *Reservation) Cancel() {
	if !r.OK() {
		return
	}
	r.ok = false
	l := r.lim
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.monotonic(now) > r.result.Start {
		return
	}
	l.params.Undo(&l.state, r.before, r.after, r.result)
}

// SetConfig reconfigures the limiter live. A config of the same kind keeps the
// schedule (backlog, pace, stored permits rescaled); another kind starts afresh.
func (l *Limiter) SetConfig(c Config) error {
	p, err := Compile(c)
	if err != nil {
		return err
	}
	norm, verb, _ := c.Normalize()
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	now = l.monotonic(now)
	if p.Kind != l.params.Kind {
		l.state = State{}
		if p.StartsAtCreation() {
			p.Start(&l.state, now)
		}
	} else {
		Reconfigure(&l.state, now, &l.params, &p)
	}
	l.params, l.config = p, norm
	if verb == VerbRestart {
		l.params.Reset(&l.state, now)
	}
	return nil
}

// Config returns the limiter's config in canonical form.
func (l *Limiter) Config() Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.config
}

// Reset starts a new schedule now: the backlog is forfeited, totals are kept.
func (l *Limiter) Reset() {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.params.Reset(&l.state, l.monotonic(now))
}

// Stats is a limiter's live state.
type Stats struct {
	Backlog   time.Duration // schedule time nobody claimed (smooth: stored time)
	Delay     time.Duration // how long a new caller would wait now
	Idle      time.Duration // total schedule time forfeited
	Allocated time.Duration // total schedule time granted
	Permits   int64         // total permits granted
}

// Stats returns the limiter's state now, without changing it.
func (l *Limiter) Stats() Stats {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.params.Peek(l.state, l.monotonic(now))
	return Stats{Backlog: time.Duration(v.Wait), Delay: time.Duration(v.Delay),
		Idle: time.Duration(v.Idle), Allocated: time.Duration(v.Allocated), Permits: v.Permits}
}
