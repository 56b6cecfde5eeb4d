package core

import (
	"context"
	"fmt"
	"time"

	"github.com/limitd/limitd"
)

// GrantRequest asks a limiter for permits for a client pool, which
// dispenses them locally and hands back the ones it will not use. The
// grant's Token carries all a handback needs, so any replica takes the
// handback of a grant another issued.
type GrantRequest struct {
	Name    string
	Permits int64         // ≥ 1
	MaxWait time.Duration // limitd.Forever: no bound; negative is 0
}

// Grant is a grant (or its refusal: Granted false, no Token), with the
// opaque Token its handback names it by.
type Grant struct {
	limitd.Grant
	Token string
}

// Grant takes permits for a client pool; a refusal (Granted false) says
// when to retry, as Acquire's.
func (s *Service) Grant(ctx context.Context, r GrantRequest) (Grant, error) {
	if r.Permits < 1 {
		return Grant{}, invalid("permits", "must be ≥ 1", r.Permits)
	}
	g, err := s.store.Grant(ctx, r.Name, r.Permits, max(0, r.MaxWait))
	if err != nil {
		return Grant{}, err
	}
	s.decided(ctx, r.Name, r.Permits, g.Decision)
	if !g.Granted {
		return Grant{Grant: g}, nil
	}
	return Grant{Grant: g, Token: encodeToken(g)}, nil
}

// HandbackRequest gives the last Permits of a grant back. The grant is its
// Token; Granted, GrantPermits and Version are the grant as the caller holds
// it, checked against the token.
type HandbackRequest struct {
	Name         string
	Token        string
	Granted      bool  // false: nothing to hand back
	GrantPermits int64 // must be the token's
	// Version other than the grant's hands the permits back as idle, never
	// rewinding the schedule (for permits from the middle of a grant).
	Version int64
	Permits int64 // 1 ≤ Permits ≤ GrantPermits
}

// Handback gives a grant's last permits back: the schedule is rewound when
// nothing was taken since, else their time counts as idle. A second
// handback changes nothing. A token that is not a grant of this limiter is
// bad input naming grant.id.
func (s *Service) Handback(ctx context.Context, r HandbackRequest) (rewound bool, err error) {
	if r.Permits < 1 || r.Permits > r.GrantPermits {
		return false, invalid("permits", fmt.Sprintf("must be ≥ 1 and at most the grant's %d", r.GrantPermits), r.Permits)
	}
	if err := limitd.CheckName(r.Name); err != nil {
		return false, err
	}
	g, err := decodeToken(r.Token, r.Name)
	if err != nil {
		return false, err
	}
	if g.Permits != r.GrantPermits {
		return false, invalid("grant.id", fmt.Sprintf("is a grant of %d permits, not of %d", g.Permits, r.GrantPermits), nil)
	}
	if !r.Granted {
		return false, nil // nothing to rewind: the permits count as used
	}
	if r.Version != g.Version {
		g.Version = -1 // as of no version: counted as idle
	}
	return s.store.Release(ctx, g, r.Permits)
}

// ChargeRequest takes Permits of a limiter (or template instance) whatever
// is left: usage recorded after the fact (limiter/charge.go).
type ChargeRequest struct {
	Name    string
	Permits int64 // ≥ 0; 0 is a check
}

// Charge takes r.Permits whatever is left (store.Store.Charge): Granted
// says whether they were there to take now, Delay how long a new caller
// would wait after them. A lease kind is ErrConflict. It is bounded by
// DecideTimeout and observed with outcome "charged".
func (s *Service) Charge(ctx context.Context, r ChargeRequest) (limitd.Decision, error) {
	if r.Permits < 0 {
		return limitd.Decision{}, invalid("permits", "a charge must be ≥ 0 (0 is a check)", r.Permits)
	}
	d, err := s.store.ChargeWithin(ctx, r.Name, r.Permits, s.within(time.Time{}))
	if err != nil {
		return limitd.Decision{}, err
	}
	s.report(ctx, r.Name, r.Permits, d, "charged")
	return d, nil
}

// SettleRequest settles a grant (Token, GrantPermits and Version as a
// HandbackRequest has them) with what its work used: Actual permits.
type SettleRequest struct {
	Name         string
	Token        string
	GrantPermits int64 // must be the token's
	Version      int64 // the grant's; another hands back as idle (see HandbackRequest)
	Actual       int64 // ≥ 0
}

// Settled is what a settle did: the charge of the excess (or a check), the
// permits handed back, and whether that rewound the schedule.
type Settled struct {
	limitd.Decision
	HandedBack int64
	Rewound    bool
}

// Settle settles a grant with the permits its work actually used: fewer
// than granted hands the rest back (Handback), more charges the excess
// (Charge); the answer tells the limiter's state after the settle. A
// repeated settle hands back once but charges again. A token that is not a
// grant of this limiter is bad input naming grant.id.
func (s *Service) Settle(ctx context.Context, r SettleRequest) (Settled, error) {
	if r.Actual < 0 {
		return Settled{}, invalid("permits", "must be ≥ 0: the permits the grant's work used", r.Actual)
	}
	g, err := decodeToken(r.Token, r.Name)
	if err != nil {
		return Settled{}, err
	}
	if g.Permits != r.GrantPermits {
		return Settled{}, invalid("grant.id", fmt.Sprintf("is a grant of %d permits, not of %d", g.Permits, r.GrantPermits), nil)
	}
	var out Settled
	if r.Actual < g.Permits {
		out.HandedBack = g.Permits - r.Actual
		out.Rewound, err = s.Handback(ctx, HandbackRequest{Name: r.Name, Token: r.Token, Granted: true,
			GrantPermits: r.GrantPermits, Version: r.Version, Permits: out.HandedBack})
		if err != nil {
			return Settled{}, err
		}
	}
	out.Decision, err = s.Charge(ctx, ChargeRequest{Name: r.Name, Permits: max(0, r.Actual-g.Permits)})
	return out, err
}
