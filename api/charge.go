package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/wire"
)

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
