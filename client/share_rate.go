package client

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/limitd/limitd/limiter"
)

// Allow reports whether one operation may start now at the share's rate.
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

// rateLimiterLocked is the local limiter at gets, nil while nothing may pass.
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
// fall back on) it returns limiter.ErrUnavailable at once.
func (s *Share) Wait(ctx context.Context) error {
	ctx, stop := mergeDone(ctx, s.ctx)
	defer stop()
	for {
		s.mu.Lock()
		if err := s.stopped(ctx); err != nil {
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
		if dl, ok := ctx.Deadline(); ok && dl.Sub(s.c.o.clock.Now()) < d {
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
	t := s.c.o.clock.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C():
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

// stopped is why a caller may not go on (s.mu held): ErrClosed, the
// fallback's refusal, or ctx's error.
func (s *Share) stopped(ctx context.Context) error {
	switch {
	case s.closed:
		return ErrClosed
	case s.refuse != nil:
		return s.refuse
	}
	return ctx.Err()
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

// newLimiter is the share's local rate limiter, on the client's clock.
func (s *Share) newLimiter(cfg limiter.Config) (*limiter.Limiter, error) {
	return limiter.New(cfg, limiter.WithClock(limiterClock{s.c.o.clock}))
}

// mergeDone returns ctx, also cancelled when other is done.
func mergeDone(ctx, other context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(other, cancel)
	return ctx, func() { stop(); cancel() }
}

// Acquire blocks until fewer than floor(Gets()) operations of this share are
// in flight, or ctx is done, and takes a place among them; release gives the
// place back (it is idempotent). In the pessimistic fallback it returns
// limiter.ErrUnavailable at once.
func (s *Share) Acquire(ctx context.Context) (release func(), err error) {
	ctx, stop := mergeDone(ctx, s.ctx)
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting++
	defer func() { s.waiting-- }()
	for {
		if err := s.stopped(ctx); err != nil {
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

// InFlight is the number of operations holding the share's capacity (Acquire).
func (s *Share) InFlight() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}
