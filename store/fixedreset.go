package store

import (
	"context"
	"time"

	"github.com/limitd/limitd/lua"
)

// FixedReset starts name's fixed windows of f (see Fixed) afresh: the
// count of the window now, as Redis' clock has it, and those of the
// windows before and after it (those a store whose estimate of Redis'
// clock is off by up to its bound may count in now), are deleted by
// lua/fixed_reset.lua, so that the next charge counts from nothing. It is
// idempotent.
func (s *Store) FixedReset(ctx context.Context, name string, f Fixed) error {
	if err := checkFixed(&Request{Name: name, Charge: true, Fixed: &f}); err != nil {
		return err
	}
	_, err := s.runAny(ctx, lua.FixedReset, []string{s.fixedBase(name)}, int64(f.Period/time.Millisecond))
	return err
}
