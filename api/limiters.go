package api

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

func stateOf(w limitd.WaitInfo) *wire.WaitState {
	v := &wire.WaitState{Wait: w.Wait, Delay: w.Delay, Idle: w.Idle, Allocated: w.Allocated, Now: w.Now,
		Version: w.Version, Permits: w.Permits, LatenessTotal: w.Lateness, Started: w.Started}
	if w.Window { // a window: wait is the permits left, position its end
		v.Wait, v.Window = 0, &wire.Window{Limit: w.Limit, Remaining: w.Wait, Reset: max(0, w.Position-w.Now), ResetAt: w.Position}
		if !w.Started {
			v.Remaining = w.Limit
		}
	}
	return v
}

func viewOf(l core.Limiter) wire.Limiter {
	v := wire.Limiter{Name: l.Name, Config: l.Config, Version: l.Version, Template: l.Template, Totals: (*wire.Totals)(l.Totals)}
	if l.Template != "" {
		ttl := l.TTL
		v.TTL = &ttl
	}
	if l.State != nil {
		v.State = stateOf(*l.State)
	}
	if h := l.Holders; h != nil {
		v.Now, v.Holders = h.Now, []wire.Holder{}
		switch h.Kind {
		case limiter.KindShare:
			held, wanted, learning := h.Held, core.ReadingOf(l).Wanted, h.Learning
			v.Held, v.Wanted, v.Learning = &held, &wanted, &learning
			for _, x := range h.Share {
				v.Holders = append(v.Holders, wire.Holder{ClientID: x.ClientID, Has: &x.Has, Wants: &x.Wants,
					Priority: &x.Priority, Expires: x.Expires})
			}
		case limiter.KindConcurrency:
			inUse := len(h.Slots)
			v.InUse = &inUse
			for _, x := range h.Slots {
				v.Holders = append(v.Holders, wire.Holder{LeaseID: x.LeaseID, Expires: x.Expires})
			}
		}
	}
	return v
}

// putLimiter creates (201) or replaces (200) a limiter; see store.Put.
func (s *server) putLimiter(c echo.Context) error {
	n := c.Param("name") // every store call checks the name first
	var cfg limiter.Config
	if err := decodeBody(c, &cfg); err != nil {
		return err
	}
	l, created, err := s.core.Put(c.Request().Context(), n, cfg)
	if err != nil {
		return err
	}
	if l.Changed {
		s.audit(c, "put", "limiter", n, l.Version-1, l.Version)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		c.Response().Header().Set(echo.HeaderLocation, "/v1/limiters/"+n)
	}
	return c.JSON(status, viewOf(l))
}

func (s *server) getLimiter(c echo.Context) error {
	l, err := s.core.Get(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewOf(l))
}

// patchLimiter applies a JSON merge patch to the limiter's canonical config
// and reconfigures it in place; a kind change is 409 (PUT replaces).
func (s *server) patchLimiter(c echo.Context) error {
	var patch map[string]json.RawMessage
	if err := decodeBody(c, &patch); err != nil {
		return err
	}
	if patch == nil {
		return invalid("", "a merge patch must be a JSON object")
	}
	l, err := s.core.Patch(c.Request().Context(), c.Param("name"), func(cur limiter.Config) (limiter.Config, error) {
		return mergePatch(cur, patch)
	})
	if err != nil {
		return err
	}
	if l.Changed {
		s.audit(c, "patch", "limiter", l.Name, l.Version-1, l.Version)
	}
	return c.JSON(http.StatusOK, viewOf(l))
}

func (s *server) deleteLimiter(c echo.Context) error {
	if err := s.core.Delete(c.Request().Context(), c.Param("name")); err != nil {
		return err
	}
	s.audit(c, "delete", "limiter", c.Param("name"))
	return c.NoContent(http.StatusNoContent)
}

// listLimiters answers one page of limiters in name order.
func (s *server) listLimiters(c echo.Context) error {
	limit, err := intParam(c, "limit", core.DefaultListLimit, core.MaxListLimit)
	if err != nil {
		return err
	}
	page, err := s.core.List(c.Request().Context(), c.QueryParam("cursor"), limit)
	if err != nil {
		return err
	}
	out := wire.LimiterList{Limiters: make([]wire.Limiter, len(page.Limiters)), Next: page.Next}
	for i, info := range page.Limiters {
		out.Limiters[i] = wire.Limiter{Name: info.Name, Config: info.Config, Version: info.Version, Totals: (*wire.Totals)(&page.Totals[i])}
	}
	return c.JSON(http.StatusOK, out)
}

func (s *server) wait(c echo.Context) error {
	w, err := s.core.Wait(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, stateOf(w))
}

// reset starts a new schedule now and answers the state after it.
func (s *server) reset(c echo.Context) error {
	w, err := s.core.Reset(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	s.audit(c, "reset", "limiter", c.Param("name"), w.Version, w.Version)
	return c.JSON(http.StatusOK, stateOf(w))
}
