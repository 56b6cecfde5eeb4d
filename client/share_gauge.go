package client

import (
	"context"
	"math"
	"sync"
)

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
