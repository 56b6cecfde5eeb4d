package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Share is one client's lease on a share limiter (a Doorman client): a part
// of a capacity that the limiter divides among the clients asking for it, by
// its algorithm (fair_share, proportional_share, static, none). It is safe for
// concurrent use.
//
// The share asks for capacity with what it wants and what it holds, and asks
// again every refresh interval the lease names, in a goroutine of its own
// that Close stops. What it wants is set with WithWants or SetWants, or else
// estimated from its own use over the last interval: the permits per second
// asked for through Allow (every call, allowed or not: call it once per
// operation, not in a spin loop) and Wait, or the most operations in flight
// and waiting through Acquire, with 10% headroom, and at least WithMinWants
// (1). Waiters that take all the share gets, mostly after waiting their
// turn, do not show how much more they want: the share then asks for twice
// what it gets, and grows in a few refreshes rather than 10% a refresh.
//
// What it gets is used either as a rate, Wait and Allow (a local strict
// limiter at Gets permits per second), or as a gauge, Acquire (at most
// floor(Gets) operations in flight). Use one or the other.
//
// While Redis is unreachable, the share keeps using its lease until the lease
// expires, then follows its fallback mode (the client's WithFallback, or
// WithShareFallback): FallbackSafe uses the lease's safe capacity (before any
// lease: the client's WithSafeRate, and without one refuses),
// FallbackOptimistic is unlimited, FallbackPessimistic refuses: Allow is
// false, Wait and Acquire return store.ErrUnavailable. Once Redis answers it
// returns to leases by itself. Lease expiry is judged on the local clock,
// converted from Redis's with an offset measured by round trips.
//
// Close returns the capacity to the limiter at once.
type Share struct {
	c    *Client
	name string
	id   string
	o    shareOptions

	ctx    context.Context // cancelled by Close: ends the refresher, waits and requests
	cancel context.CancelFunc
	kick   chan struct{} // SetWants asks the refresher for a request now
	done   chan struct{} // closed when the refresher has ended

	// reqMu serialises requests, so that leases apply in the order granted
	// and none is granted after Close returned the capacity.
	reqMu sync.Mutex

	mu       sync.Mutex
	lease    store.CapacityLease
	leased   bool  // lease is the last one granted (it may have expired)
	expires  int64 // local ns at which lease ends
	next     int64 // local ns of the next request
	err      error // the last request's error; nil after a grant
	wants    float64
	explicit bool    // wants was set, not estimated
	asked    float64 // the wants of the last request
	gets     float64 // in effect: the lease's, or the fallback's; +Inf: unlimited
	live     bool    // gets is the lease's, until it expires
	fallback bool    // gets is the fallback's
	refuse   error   // non-nil while nothing may pass and callers should not wait: why
	lim      *limiter.Limiter
	changed  chan struct{} // closed and replaced when gets changes, or a gauge slot frees for waiters
	inFlight int64         // gauge operations holding capacity
	waiting  int64         // gauge callers waiting for it
	closed   bool

	// use since the last request, for estimated wants
	calls    int64 // Allow calls (each an operation that wants to happen) and Wait grants
	granted  int64 // permits Allow and Wait took
	waits    int64 // Wait grants
	waited   int64 // of which had to wait for their turn
	usedFrom int64 // local ns
	peak     int64 // most gauge operations holding or waiting at once
}

// ShareOption configures a Share.
type ShareOption func(*shareOptions)

type shareOptions struct {
	clientID    string
	wants       float64 // < 0: estimated
	priority    float64
	minWants    float64
	fallback    Fallback
	hasFallback bool
}

// WithClientID sets the id the share asks under (default
// hostname-pid-random). Two shares with the same id on the same limiter are
// one client to it: give each process, and each share in it, its own id.
func WithClientID(id string) ShareOption { return func(o *shareOptions) { o.clientID = id } }

// WithWants sets what the share asks for instead of estimating it.
func WithWants(w float64) ShareOption { return func(o *shareOptions) { o.wants = w } }

// WithPriority sets the weight of the share's claim (default 1): it counts
// as that many clients in the algorithm's equal shares.
func WithPriority(p float64) ShareOption { return func(o *shareOptions) { o.priority = p } }

// WithMinWants sets the least an estimated wants asks for (default 1), so
// that an idle share can start using capacity at once.
func WithMinWants(w float64) ShareOption {
	return func(o *shareOptions) { o.minWants = max(w, 0) }
}

// WithShareFallback sets the share's fallback mode, overriding the client's.
func WithShareFallback(f Fallback) ShareOption {
	return func(o *shareOptions) { o.fallback, o.hasFallback = f, true }
}

const (
	shareHeadroom = 1.1  // estimated wants: recent use × this
	shareBusy     = 0.97 // a share that used this much of what it got was held back by it
	// shareTimeout bounds one request, and Close's return of the capacity.
	shareTimeout = 5 * time.Second
)

// Share asks the named share limiter for capacity and returns the share,
// which keeps asking until Close. An unknown limiter is limiter.ErrNotFound,
// one of another kind store.ErrConflict, a bad name, client id or wants
// limiter.ErrInvalid. An unreachable Redis is not an error: the share starts
// in its fallback mode.
func (c *Client) Share(name string, opts ...ShareOption) (*Share, error) {
	if err := store.CheckName(name); err != nil {
		return nil, err
	}
	o := shareOptions{wants: -1, minWants: 1}
	for _, f := range opts {
		f(&o)
	}
	if !o.hasFallback {
		o.fallback = c.o.fallback
	}
	if o.clientID == "" {
		o.clientID = defaultClientID()
	}
	if err := checkWants(o.wants); err != nil {
		return nil, err
	}
	s := &Share{c: c, name: name, id: o.clientID, o: o, kick: make(chan struct{}, 1),
		done: make(chan struct{}), changed: make(chan struct{}), wants: o.wants, explicit: o.wants >= 0}
	s.ctx, s.cancel = context.WithCancel(c.ctx)
	s.usedFrom = c.mono()
	if err := c.track(s); err != nil {
		s.cancel()
		return nil, err
	}
	if err := s.request(); err != nil && !unreachable(err) {
		s.cancel()
		close(s.done) // for a Close by the client's meanwhile
		c.untrack(s)
		return nil, err
	}
	go s.run()
	return s, nil
}

// checkWants accepts a finite wants; a negative one means "estimate it".
func checkWants(w float64) error {
	if math.IsNaN(w) || math.IsInf(w, 0) {
		return &limiter.FieldError{Field: "wants", Rule: "must be ≥ 0 and finite (< 0: estimated from use)", Value: w}
	}
	return nil
}

// defaultClientID is hostname-pid-random, with the characters a client id
// may not hold replaced.
func defaultClientID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r < 128 && (isAlnum(byte(r)) || r == '.' || r == '_' || r == '-') {
			return r
		}
		return '-'
	}, host)
	if len(host) > 64 {
		host = host[:64]
	}
	if host == "" || !isAlnum(host[0]) {
		host = "h" + host
	}
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// ClientID is the id the share asks under.
func (s *Share) ClientID() string { return s.id }

// Gets is the capacity in effect: the lease's while it is valid, else the
// fallback's (+Inf: unlimited).
func (s *Share) Gets() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// ShareLease describes a share's lease and what is in effect.
type ShareLease struct {
	Gets         float64       // what the last lease granted
	Expires      time.Time     // when it ends (Redis clock); zero before any lease
	Refresh      time.Duration // how often the share asks again
	SafeCapacity float64       // what FallbackSafe uses
	Learning     bool          // granted in learning mode (the limiter's state was lost)
	Version      int64         // the limiter's config version
	Valid        bool          // the lease has not expired
	Wants        float64       // what the last request asked for
	InEffect     float64       // Gets(): the lease's, or the fallback's
	Fallback     bool          // the fallback mode is in effect
	Err          error         // the last request's error (nil after a grant)
}

// Lease returns the share's last lease and its state.
func (s *Share) Lease() ShareLease {
	now := s.c.mono()
	s.mu.Lock()
	defer s.mu.Unlock()
	l := ShareLease{Wants: s.asked, InEffect: s.gets, Fallback: s.fallback, Err: s.err}
	if s.leased {
		l.Gets, l.Refresh, l.SafeCapacity = s.lease.Gets, time.Duration(s.lease.Refresh), s.lease.SafeCapacity
		l.Expires, l.Learning, l.Version = time.Unix(0, s.lease.Expires), s.lease.Learning, s.lease.Version
		l.Valid = now < s.expires
	}
	return l
}

// SetWants sets what the share asks for (w < 0: estimate it again from use)
// and asks at once, without waiting for the next refresh.
func (s *Share) SetWants(w float64) error {
	if err := checkWants(w); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.wants, s.explicit = w, w >= 0
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// Refresh asks for capacity now, as the share's refresher does every refresh
// interval, and returns the request's error.
func (s *Share) Refresh(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	ctx, stop := mergeDone(ctx, s.ctx)
	defer stop()
	return s.requestCtx(ctx)
}

// Allow reports whether one operation may start now at the rate of the
// share's capacity; if so it is counted.
func (s *Share) Allow() bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.calls++
	if math.IsInf(s.gets, 1) {
		s.granted++
		s.mu.Unlock()
		return true
	}
	lim := s.rateLimiterLocked()
	s.mu.Unlock()
	if lim == nil || !lim.Allow() {
		return false
	}
	s.mu.Lock()
	s.granted++
	s.mu.Unlock()
	return true
}

// rateLimiterLocked is the local limiter at gets, nil while gets is below
// the least rate (nothing may pass).
func (s *Share) rateLimiterLocked() *limiter.Limiter {
	if s.gets < limiter.MinRate {
		return nil
	}
	return s.lim
}

// Wait blocks until one operation may start at the rate of the share's
// capacity, or ctx is done; a deadline before the operation's turn is
// limiter.ErrDeadline at once. While the share gets nothing it waits for a
// lease that gives it something, and a new lease applies to the callers
// already waiting. In the pessimistic fallback (or without a safe capacity to
// fall back on) it returns store.ErrUnavailable at once.
func (s *Share) Wait(ctx context.Context) error {
	ctx, stop := mergeDone(ctx, s.ctx)
	defer stop()
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		if s.refuse != nil {
			err := s.refuse
			s.mu.Unlock()
			return err
		}
		if err := ctx.Err(); err != nil {
			s.mu.Unlock()
			return err
		}
		if math.IsInf(s.gets, 1) {
			s.calls++
			s.granted++
			s.waits++
			s.mu.Unlock()
			return nil
		}
		lim, gets, ch := s.rateLimiterLocked(), s.gets, s.changed
		s.mu.Unlock()
		if lim == nil {
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return s.waitErr(ctx.Err())
			}
		}
		r, err := lim.Reserve(1)
		if err != nil {
			return err
		}
		d := r.Delay()
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			r.Cancel()
			return limiter.ErrDeadline
		}
		if granted, err := s.sleep(ctx, r, d, lim, gets, ch); granted || err != nil {
			return err
		}
	}
}

// sleep waits out a reservation on lim, made at gets. It gives the permits
// back and returns false (try again) when a new lease changed what is in
// effect, so that waiters follow the new rate rather than the old one.
func (s *Share) sleep(ctx context.Context, r *limiter.Reservation, d time.Duration, lim *limiter.Limiter, gets float64, ch chan struct{}) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.mu.Lock()
			s.calls++
			s.granted++
			s.waits++
			if d > 0 {
				s.waited++
			}
			s.mu.Unlock()
			return true, nil
		case <-ctx.Done():
			r.Cancel()
			return false, s.waitErr(ctx.Err())
		case <-ch:
			s.mu.Lock()
			same := s.lim == lim && s.gets == gets && s.refuse == nil && !s.closed
			ch = s.changed
			s.mu.Unlock()
			if !same {
				r.Cancel()
				return false, nil
			}
		}
	}
}

// waitErr is ErrClosed for a wait that Close ended.
func (s *Share) waitErr(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return err
}

// Acquire blocks until fewer than floor(Gets()) operations of this share are
// in flight, or ctx is done, and takes a place among them; release gives the
// place back (it is idempotent). In the pessimistic fallback it returns
// store.ErrUnavailable at once.
func (s *Share) Acquire(ctx context.Context) (release func(), err error) {
	ctx, stop := mergeDone(ctx, s.ctx)
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting++
	defer func() { s.waiting-- }()
	for {
		if s.closed {
			return nil, ErrClosed
		}
		if s.refuse != nil {
			return nil, s.refuse
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s.peak = max(s.peak, s.inFlight+s.waiting)
		if float64(s.inFlight) < math.Floor(s.gets) { // +Inf: always
			s.inFlight++
			var once sync.Once
			return func() { once.Do(s.releaseGauge) }, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
		case <-ctx.Done():
			s.mu.Lock()
			if s.closed {
				return nil, ErrClosed
			}
			return nil, ctx.Err()
		}
	}
}

func (s *Share) releaseGauge() {
	s.mu.Lock()
	s.inFlight--
	if s.waiting > 0 {
		s.notifyLocked()
	}
	s.mu.Unlock()
}

// InFlight is the number of operations holding the share's capacity through
// Acquire.
func (s *Share) InFlight() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

func (s *Share) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Close stops the refresher, ends every wait with ErrClosed and returns the
// capacity to the limiter.
func (s *Share) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.notifyLocked()
	s.mu.Unlock()
	s.cancel()
	<-s.done
	s.c.untrack(s)
	return s.giveBack()
}

// giveBack returns the capacity the share holds, if any.
func (s *Share) giveBack() error {
	s.reqMu.Lock() // after the request in flight, if any; none follows
	defer s.reqMu.Unlock()
	s.mu.Lock()
	leased := s.leased
	s.mu.Unlock()
	if !leased {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shareTimeout)
	defer cancel()
	if err := s.c.t.ReturnCapacity(ctx, s.name, s.id); err != nil && !errors.Is(err, limiter.ErrNotFound) {
		return fmt.Errorf("client: share %q: returning capacity: %w", s.name, err)
	}
	return nil
}

// run is the refresher: it asks for capacity when the lease says to (sooner
// while Redis does not answer) and applies the fallback when the lease
// expires unrenewed.
func (s *Share) run() {
	defer close(s.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		s.mu.Lock()
		wake := s.next
		if s.live && s.expires < wake {
			wake = s.expires // to fall back on time
		}
		s.mu.Unlock()
		t.Reset(time.Duration(max(wake-s.c.mono(), 0)))
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
			_ = s.request()
			continue
		case <-t.C:
		}
		s.mu.Lock()
		due := s.c.mono() >= s.next
		s.mu.Unlock()
		if due {
			_ = s.request()
		} else {
			s.expire()
		}
	}
}

// request asks for capacity with the share's own context.
func (s *Share) request() error {
	ctx, cancel := context.WithTimeout(s.ctx, shareTimeout)
	defer cancel()
	return s.requestCtx(ctx)
}

// requestCtx asks for capacity and applies the answer, or the error.
func (s *Share) requestCtx(ctx context.Context) error {
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	t0 := s.c.mono()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed // Close has returned the capacity, or is about to
	}
	r := s.requestLocked(t0)
	s.mu.Unlock()
	l, err := s.c.t.Capacity(ctx, s.name, r)
	t1 := s.c.mono()
	if err != nil {
		s.mu.Lock()
		s.err = err
		retry := int64(s.c.o.retry)
		if s.leased {
			retry = min(retry, s.lease.Refresh)
		}
		s.next = t1 + retry
		s.mu.Unlock()
		s.expire()
		return err
	}
	off := s.c.redisOffset(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lease, s.leased, s.err, s.asked = l, true, nil, r.Wants
	// The offset is right within half a round trip: judged a round trip
	// early, the lease is not used past its end.
	s.expires = l.Expires - off - (t1 - t0)
	// Ask again after the refresh interval, but well before the lease ends
	// (a refresh interval may equal the lease).
	s.next = min(t1+l.Refresh, t0+(s.expires-t0)*3/4)
	s.next = max(s.next, t1+int64(time.Millisecond))
	if s.closed {
		return nil
	}
	s.applyLocked(l.Gets, false, nil)
	s.live = true
	return nil
}

// requestLocked builds the next request and starts a new window of use.
func (s *Share) requestLocked(now int64) store.CapacityRequest {
	r := store.CapacityRequest{ClientID: s.id, Wants: s.wants, Priority: s.o.priority}
	if !s.explicit {
		r.Wants = s.estimateLocked(now)
	}
	if s.leased && now < s.expires {
		r.Has = s.lease.Gets
	}
	s.calls, s.granted, s.waits, s.waited, s.usedFrom = 0, 0, 0, 0, now
	s.peak = s.inFlight + s.waiting
	return r
}

// estimateLocked is the wants a share's own use over the window since the
// last request calls for.
func (s *Share) estimateLocked(now int64) float64 {
	var rate float64
	if secs := float64(now-s.usedFrom) / 1e9; secs > 0.001 {
		rate = float64(s.calls) / secs
		// Waits take their turns: a share whose callers mostly waited, and
		// that used all it got, cannot see its demand, only that it is at
		// least what it got. It probes for twice that.
		if s.waited*2 > s.waits && float64(s.granted)/secs >= shareBusy*s.gets {
			rate = max(rate, 2*s.gets)
		}
	}
	w := max(rate, float64(s.peak)) * shareHeadroom
	if math.IsInf(w, 0) || math.IsNaN(w) {
		w = math.MaxFloat64 / 2
	}
	return max(w, s.o.minWants)
}

// expire applies the fallback when the lease has run out unrenewed.
func (s *Share) expire() {
	now := s.c.mono()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || (s.leased && now < s.expires) {
		return // a request failed, but the lease still holds: keep using it
	}
	switch err := s.err; {
	case err == nil:
		// Expired before the refresher got to ask (a stall): nothing is
		// held; the request that follows at once decides.
		s.applyLocked(0, false, nil)
	case !unreachable(err):
		if s.fallback {
			// Redis is back but without the limiter: it restarted empty and
			// the limiter is not yet re-created. Callers never see that gap.
			return
		}
		// The limiter is gone or changed kind: nothing, never everything.
		s.applyLocked(0, false, fmt.Errorf("client: share %q: %w", s.name, err))
	default:
		unavailable := fmt.Errorf("client: share %q: lease expired: %w", s.name, err)
		switch s.o.fallback {
		case FallbackOptimistic:
			s.applyLocked(math.Inf(1), true, nil)
		case FallbackPessimistic:
			s.applyLocked(0, true, unavailable)
		default:
			safe := s.c.o.safeRate
			if s.leased {
				safe = s.lease.SafeCapacity
			}
			if safe > 0 {
				s.applyLocked(safe, true, nil)
			} else {
				s.applyLocked(0, true, unavailable)
			}
		}
	}
}

// applyLocked puts gets into effect and wakes the waiters.
func (s *Share) applyLocked(gets float64, fallback bool, refuse error) {
	s.fallback, s.refuse, s.live = fallback, refuse, false
	if gets >= limiter.MinRate && !math.IsInf(gets, 1) {
		cfg := limiter.Config{Rate: min(gets, limiter.MaxRate), Burst: limiter.B(1)}
		switch {
		case s.lim == nil:
			s.lim, _ = limiter.New(cfg) // valid: the rate is in range
		case gets != s.gets:
			_ = s.lim.SetConfig(cfg)
			// The next permit is still a slice of the old rate away: going
			// from a trickle to more, that would hold the new rate back for
			// up to the old slice. Start afresh (one permit may come up to a
			// slice early); waiters move to the new limiter.
			if s.lim.Stats().Delay > time.Duration(1e9/cfg.Rate) {
				s.lim, _ = limiter.New(cfg)
			}
		}
	}
	s.gets = gets
	s.notifyLocked()
}

// mergeDone returns ctx, also cancelled when other is done.
func mergeDone(ctx, other context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(other, cancel)
	return ctx, func() { stop(); cancel() }
}

// redisClock is the offset of the Redis clock (leases expire on it) from the
// client's local monotonic clock.
type redisClock struct {
	mu  sync.Mutex
	off int64 // Redis Unix ns − local ns
	at  int64 // local ns of the last measure; 0: none yet
}

// clockResample is how long an offset measure serves before a new one.
const clockResample = 30 * time.Second

// redisOffset returns Redis Unix ns − c.mono(), measured by a TIME round trip
// when the last measure is older than clockResample (through c.clk, which
// keeps the best of the recent round trips, grants' included). Until Redis
// has answered one, the local wall clock stands in for it.
func (c *Client) redisOffset(ctx context.Context) int64 {
	c.rc.mu.Lock()
	off, at := c.rc.off, c.rc.at
	c.rc.mu.Unlock()
	if at != 0 && c.mono()-at < int64(clockResample) {
		return off
	}
	t0 := c.mono()
	now, err := c.t.Time(ctx)
	t1 := c.mono()
	if err != nil {
		if at != 0 {
			return off
		}
		return c.base.UnixNano()
	}
	off = c.clk.sample(now, t0, t1)
	c.rc.mu.Lock()
	c.rc.off, c.rc.at = off, max(t1, 1)
	c.rc.mu.Unlock()
	return off
}
