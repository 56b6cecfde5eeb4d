package core

import (
	"context"
	"errors"
	"sync"
)

// Lost reports which of the named limiters and templates Redis lost (see
// store.Lost); when some checks fail, the names found lost are returned
// with an error matching ErrUnavailable.
func (s *Service) Lost(ctx context.Context, limiters, templates []string) (lostLimiters, lostTemplates []string, err error) {
	return s.store.Lost(ctx, limiters, templates)
}

// Mark records which configuration was last applied to this Redis: sum (a
// file's hash; empty without one) under the key <prefix>:boot, the marker
// whose loss tells that Redis lost limitd's data (docs/reliability.md); on
// a Redis Cluster it is one shard's, and Lost tells what each shard lost. A
// Mark that succeeds ends a pending loss.
func (s *Service) Mark(ctx context.Context, sum string) error {
	if err := s.store.Mark(ctx, sum); err != nil {
		return err
	}
	s.loss.mu.Lock()
	s.loss.marked, s.loss.pending = true, false
	s.loss.marks++
	s.loss.mu.Unlock()
	return nil
}

// CheckMarker looks for limitd's marker once it was written (Mark): when it
// is gone, Redis lost limitd's data (DataLost). It reports whether a loss
// is pending: found now or before, and not marked again since.
func (s *Service) CheckMarker(ctx context.Context) (pending bool, err error) {
	s.loss.mu.Lock()
	marking, marks := s.loss.marked, s.loss.marks
	s.loss.mu.Unlock()
	if !marking {
		return false, nil
	}
	marked, now, err := s.store.Marked(ctx) // and Redis' time, in one round trip
	if err != nil {
		return false, err
	}
	s.loss.mu.Lock()
	defer s.loss.mu.Unlock()
	// A Mark that succeeded while the answer was on its way wrote the
	// marker again: the answer tells of the loss that Mark ended.
	if !marked && s.loss.marks == marks {
		s.loss.lost(now)
	}
	return s.loss.pending, nil
}

// dataLoss is what the service knows of Redis losing its data.
type dataLoss struct {
	mu      sync.Mutex
	marked  bool  // Mark succeeded once: a missing marker now means a loss
	marks   int64 // Marks that succeeded
	at      int64 // when the last loss was found, Redis time; 0: never
	pending bool  // found lost, not marked again yet
	count   int64
	found   chan struct{} // told each new loss (capacity 1)
}

// DataLost records that Redis was found to have lost limitd's data at at
// (Redis time, Unix ns): Ready fails until Mark succeeds again. It reports
// whether this is a new loss (false while one is pending).
func (s *Service) DataLost(at int64) bool {
	s.loss.mu.Lock()
	defer s.loss.mu.Unlock()
	return s.loss.lost(at)
}

// lost is DataLost, called with l.mu.
func (l *dataLoss) lost(at int64) bool {
	if l.pending {
		return false
	}
	l.at, l.pending = at, true
	l.count++
	select {
	case l.found <- struct{}{}:
	default: // told already, not taken yet
	}
	return true
}

// DataLosses is told each new data loss, so that a keeper applies the
// configuration again at once. One keeper reads it.
func (s *Service) DataLosses() <-chan struct{} { return s.loss.found }

// DataLoss reports when Redis was last found to have lost limitd's data
// (Redis time, Unix ns; 0: never), whether that loss is pending, and how
// many losses this process found.
func (s *Service) DataLoss() (at int64, pending bool, count int64) {
	s.loss.mu.Lock()
	defer s.loss.mu.Unlock()
	return s.loss.at, s.loss.pending, s.loss.count
}

// ErrDataLost is what Ready answers (wrapped, matching ErrUnavailable too)
// while a data loss is pending.
var ErrDataLost = errors.New("redis lost limitd's data; the configuration is being applied again")
