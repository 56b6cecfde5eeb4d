package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

// Grants: what a client pool over HTTP (client.NewHTTP) takes from a
// schedule in one call, its id a token that carries what the handback needs
// (core.Grant), so that any replica takes the handback.

// grant takes permits for a client pool: 200, or 429 (as acquire).
func (s *server) grant(c echo.Context) error {
	var req wire.GrantRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Permits == nil {
		return required("permits", "how many permits the pool takes")
	}
	r := core.GrantRequest{Name: c.Param("name"), Permits: *req.Permits, MaxWait: limitd.Forever}
	if req.MaxWait != nil {
		r.MaxWait = time.Duration(*req.MaxWait)
	}
	g, err := s.core.Grant(c.Request().Context(), r)
	if err != nil {
		return err
	}
	if !g.Granted {
		return answer(c, g.Decision)
	}
	return c.JSON(http.StatusOK, wire.Grant{ID: g.Token, Granted: true, Permits: g.Permits, Scheduled: g.Scheduled,
		Start: g.Start, Delay: g.Delay, Lateness: g.Lateness, Wait: g.Wait, Version: g.Version, Now: g.Now, Kind: g.Kind,
		Slice: wire.Slice{Whole: g.Slice.Whole, Frac: g.Slice.Frac, Den: g.Slice.Den}, Burst: limiter.Burst(g.Burst),
		RemBefore: g.RemBefore, End: g.End})
}

// handback gives a grant's last permits back: the schedule is rewound when
// nothing was taken since (rewound: true), else their time counts as idle.
func (s *server) handback(c echo.Context) error {
	var req wire.HandbackRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Grant == nil {
		return required("grant", "the grant as POST .../grant answered it")
	}
	if req.Permits == nil {
		return required("permits", "how many of the grant's last permits go back")
	}
	g := req.Grant
	rewound, err := s.core.Handback(c.Request().Context(), core.HandbackRequest{Name: c.Param("name"), Token: g.ID,
		Granted: g.Granted, GrantPermits: g.Permits, Version: g.Version, Permits: *req.Permits})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.Handback{Rewound: rewound})
}
