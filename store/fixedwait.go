package store

import (
	"context"

	"github.com/limitd/limitd"
)

// FixedWait reads name's fixed window of f (see Fixed) that holds Redis'
// time now, counting nothing, as Wait reads a window limiter's state and as
// the next charge of name would see it: Wait is the hits left (0 once the
// count reached f.Limit, however far past it), Delay the time until one is
// (the window's end once none is), Position that end, Limit f.Limit, Now
// Redis' time, and Started once the window has counted a hit. A fixed
// window keeps no totals: Allocated, Idle, Permits and Lateness are 0.
func (s *Store) FixedWait(ctx context.Context, name string, f Fixed) (limitd.WaitInfo, error) {
	gs := []fixedGroup{{name: name, f: f}}
	if err := checkFixed(&Request{Name: name, Charge: true, Fixed: &gs[0].f}); err != nil {
		return limitd.WaitInfo{}, err
	}
	s.fixedScript(ctx, gs)
	g := gs[0]
	if g.err != nil {
		return limitd.WaitInfo{}, g.err
	}
	d := fixedDecision(f.Limit, g.count, 0, g.now, g.start+int64(f.Period))
	return limitd.WaitInfo{Wait: d.Wait, Delay: d.Delay, Now: d.Now, Started: g.count > 0, Instance: true,
		Position: d.Position, Window: true, Limit: f.Limit}, nil
}
