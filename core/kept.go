package core

import (
	"context"
	"time"
)

// Lost reports which of the named limiters and templates Redis lost (a
// node restarted without persistence, an index shard emptied): a limiter
// whose config is gone or that List no longer names, a template the
// template table lacks. Every name is checked, in one round trip per node
// (store.Lost). What a configuration keeper applies again is what it
// answers; when some checks fail, the names found lost are returned with an
// error matching ErrUnavailable.
func (s *Service) Lost(ctx context.Context, limiters, templates []string) (lostLimiters, lostTemplates []string, err error) {
	start := time.Now()
	lostLimiters, lostTemplates, err = s.store.Lost(ctx, limiters, templates)
	s.timed(OpLost, start)
	return lostLimiters, lostTemplates, err
}

// Mark records which configuration was last applied to this Redis: sum (a
// file's hash, say) under the key <prefix>:boot, for an operator to read.
// Nothing relies on it to tell what Redis lost (Lost does): on a Redis
// Cluster it lives on one shard, and another shard may restart empty while
// it stays.
func (s *Service) Mark(ctx context.Context, sum string) error {
	start := time.Now()
	err := s.store.Client().Set(ctx, s.store.Prefix()+":boot", sum, 0).Err()
	s.timed(OpMark, start)
	return err
}
