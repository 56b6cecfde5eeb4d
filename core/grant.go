package core

import (
	"context"
	"fmt"
	"time"

	"github.com/limitd/limitd"
)

// Grants: what a client pool over a front end (client.NewHTTP) takes from a
// schedule in one call and dispenses locally, and hands back when it will
// not use the last permits.
//
// A handback needs the whole grant, the part only the store makes
// (limitd.GrantOrigin) included. The grant's Token carries all of it, so the
// service keeps nothing: any replica, a restarted one included, takes the
// handback of a grant another issued.

// GrantRequest asks a limiter for permits for a client pool.
type GrantRequest struct {
	Name    string
	Permits int64         // ≥ 1
	MaxWait time.Duration // limitd.Forever: no bound; negative is 0
}

// Grant is a grant (or its refusal: Granted false, no Token): the store's,
// with what a pool needs to place each permit on the schedule, and the
// Token that names it in its handback: an opaque string carrying what the
// handback needs (see HandbackRequest).
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
// nothing was taken since (rewound: true), else their time counts as idle.
// A grant is handed back once; a second handback changes nothing. A token
// that is not a grant of this limiter (garbled, or another limiter's) is
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
