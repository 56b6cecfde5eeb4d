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

// charge takes permits whatever is left, or settles a grant: 200 with the
// limiter after it (a charge is never refused for lack of permits), 400
// naming permits, 404, 409 for a share or concurrency limiter.
func (s *server) charge(c echo.Context) error {
	var req wire.ChargeRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Permits == nil {
		return required("permits", "how many permits the work used (0: a check, which takes nothing)")
	}
	ctx, name := c.Request().Context(), c.Param("name")
	if g := req.Grant; g != nil {
		st, err := s.core.Settle(ctx, core.SettleRequest{Name: name, Token: g.ID, GrantPermits: g.Permits,
			Version: g.Version, Actual: *req.Permits})
		if err != nil {
			return err
		}
		v := chargedOf(st.Decision)
		back, rewound := st.HandedBack, st.Rewound
		v.HandedBack, v.Rewound = &back, &rewound
		return c.JSON(http.StatusOK, windowed(v, st.Decision))
	}
	d, err := s.core.Charge(ctx, core.ChargeRequest{Name: name, Permits: *req.Permits})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, windowed(chargedOf(d), d))
}

// chargedOf is a charge's answer body (a window's: see windowed).
func chargedOf(d limitd.Decision) wire.Charged {
	return wire.Charged{Permits: d.Permits, Within: d.Granted, Delay: d.Delay, Wait: d.Wait, Version: d.Version, Now: d.Now}
}

// windowed is v, or for a window limiter v with its Window (and no backlog).
func windowed(v wire.Charged, d limitd.Decision) any {
	if !d.Window {
		return v
	}
	v.Wait = 0
	return wire.WindowCharged{Charged: v, Window: windowOf(d)}
}
