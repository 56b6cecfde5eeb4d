package client

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

func (s *Share) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// run is the refresher: it asks for capacity when the lease says to (sooner
// while Redis does not answer), and applies the fallback at expiry.
func (s *Share) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		wake := s.next
		if s.live && s.expires < wake {
			wake = s.expires // to fall back on time
		}
		s.mu.Unlock()
		t := s.c.o.clock.NewTimer(time.Duration(max(wake-s.c.mono(), 0)))
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-s.kick:
			t.Stop()
			_ = s.request()
			continue
		case <-t.C():
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
func (s *Share) requestLocked(now int64) limitd.CapacityRequest {
	r := limitd.CapacityRequest{ClientID: s.id, Wants: s.wants, Priority: s.o.priority}
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

// estimateLocked is the wants the share's use since the last request calls for.
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
	return max(w, shareMinWants)
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
		safe := s.c.o.safeRate
		if s.leased {
			safe = s.lease.SafeCapacity
		}
		switch {
		case s.o.fallback == FallbackOptimistic:
			s.applyLocked(math.Inf(1), true, nil)
		case s.o.fallback != FallbackPessimistic && safe > 0:
			s.applyLocked(safe, true, nil)
		default:
			s.applyLocked(0, true, fmt.Errorf("client: share %q: lease expired: %w", s.name, err))
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
			s.lim, _ = s.newLimiter(cfg) // valid: the rate is in range
		case gets != s.gets:
			_ = s.lim.SetConfig(cfg)
			// The next permit is still a slice of the old rate away: going
			// from a trickle to more, that would hold the new rate back for
			// up to the old slice. Start afresh (one permit may come up to a
			// slice early); waiters move to the new limiter.
			if s.lim.Stats().Delay > time.Duration(1e9/cfg.Rate) {
				s.lim, _ = s.newLimiter(cfg)
			}
		}
	}
	s.gets = gets
	s.notifyLocked()
}
