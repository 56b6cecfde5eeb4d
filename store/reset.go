package store

import (
	"context"

	"github.com/limitd/limitd/lua"
)

// Reset starts a new schedule now: the backlog (smooth: stored permits) is
// forfeited, totals are kept.
func (s *Store) Reset(ctx context.Context, name string) (version int64, err error) {
	keys, tpl, err := s.target(ctx, name)
	if err != nil {
		return 0, err
	}
	v, err := s.run(ctx, lua.Reset, keys, tpl.args()...)
	if err != nil {
		return 0, err
	}
	if err := replyErr("reset", name, v); err != nil { // {-1} has no version
		return 0, err
	}
	r := &reply{v: v}
	version = r.int(1)
	if r.has(2) { // a started limiter's position
		now := r.int(2) * 1000
		if pos := now + r.int(3); r.err == nil {
			s.floors.see(name, now, pos)
		}
	}
	return version, r.check("reset", name)
}
