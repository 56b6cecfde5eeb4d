package store

import (
	"context"
	"time"

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
	gs, err := s.fixedRead(ctx, []string{name}, f)
	if err != nil {
		return limitd.WaitInfo{}, err
	}
	g := gs[0]
	d := fixedDecision(f.Limit, g.count, 0, g.now, g.start+int64(f.Period))
	return limitd.WaitInfo{Wait: d.Wait, Delay: d.Delay, Now: d.Now, Started: g.count > 0, Instance: true,
		Position: d.Position, Window: true, Limit: f.Limit}, nil
}

// FixedCounts reads the counts of names' fixed windows of period (see
// Fixed) that hold Redis' time now, counting nothing.
func (s *Store) FixedCounts(ctx context.Context, names []string, period time.Duration) ([]int64, error) {
	gs, err := s.fixedRead(ctx, names, Fixed{Period: period})
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(gs))
	for i, g := range gs {
		out[i] = g.count
	}
	return out, nil
}

// fixedRead reads names' windows of f that hold Redis' time now by the
// script (hits 0: it counts nothing).
func (s *Store) fixedRead(ctx context.Context, names []string, f Fixed) ([]fixedGroup, error) {
	gs := make([]fixedGroup, len(names))
	for i, n := range names {
		gs[i] = fixedGroup{name: n, f: f}
		if err := checkFixed(&Request{Name: n, Charge: true, Fixed: &f}); err != nil {
			return nil, err
		}
	}
	s.fixedScript(ctx, gs)
	for _, g := range gs {
		if g.err != nil {
			return nil, g.err
		}
	}
	return gs, nil
}
