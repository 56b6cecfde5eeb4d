package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

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
		v.TTL = new(l.TTL)
	}
	if l.State != nil {
		v.State = stateOf(*l.State)
	}
	if h := l.Holders; h != nil {
		v.Now, v.Holders = h.Now, []wire.Holder{}
		switch h.Kind {
		case limiter.KindShare:
			v.Held, v.Wanted, v.Learning = new(h.Held), new(core.ReadingOf(l).Wanted), new(h.Learning)
			for _, x := range h.Share {
				v.Holders = append(v.Holders, wire.Holder{ClientID: x.ClientID, Has: &x.Has, Wants: &x.Wants,
					Priority: &x.Priority, Expires: x.Expires})
			}
		case limiter.KindConcurrency:
			v.InUse = new(len(h.Slots))
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

// templateID returns the {id} path parameter, checked before the body is read.
func templateID(c echo.Context) (string, error) {
	v := c.Param("id")
	return v, limitd.CheckNameAs("id", v)
}

// putTemplate creates (201) or replaces (200) a template.
func (s *server) putTemplate(c echo.Context) error {
	tid, err := templateID(c)
	if err != nil {
		return err
	}
	var req wire.TemplateRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.ID != nil && *req.ID != tid {
		return invalid("id", fmt.Sprintf("id: must be left out or equal the id in the path, %q (got %s)", tid, quote(*req.ID)))
	}
	if len(req.Limiter) == 0 || isNull(req.Limiter) {
		return required("limiter", "the config of the limiters the template makes")
	}
	var cfg limiter.Config
	if err := decodeStrict(req.Limiter, &cfg, "limiter"); err != nil {
		return err
	}
	var before int64 // for the audit line
	if old, err := s.core.GetTemplate(c.Request().Context(), tid); err == nil {
		before = old.Version
	}
	t, created, err := s.core.PutTemplate(c.Request().Context(),
		limitd.Template{ID: tid, Pattern: req.Pattern, Order: req.Order, IdleTTL: req.IdleTTL, Limiter: cfg, Description: req.Description})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		c.Response().Header().Set(echo.HeaderLocation, "/v1/templates/"+tid)
	}
	if created || t.Version != before {
		s.audit(c, "put", "template", tid, before, t.Version)
	}
	return c.JSON(status, wire.Template(t))
}

func (s *server) getTemplate(c echo.Context) error {
	tid, err := templateID(c)
	if err != nil {
		return err
	}
	t, err := s.core.GetTemplate(c.Request().Context(), tid)
	if err != nil {
		return err
	}
	n, exact, err := s.core.Instances(c.Request().Context(), tid)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.TemplateView{Template: wire.Template(t), Instances: n, InstancesExact: exact})
}

func (s *server) deleteTemplate(c echo.Context) error {
	tid, err := templateID(c)
	if err != nil {
		return err
	}
	if err := s.core.DeleteTemplate(c.Request().Context(), tid); err != nil {
		return err
	}
	s.audit(c, "delete", "template", tid)
	return c.NoContent(http.StatusNoContent)
}

// listTemplates answers every template in matching order; with
// ?instances=true each with its count of live instances.
func (s *server) listTemplates(c echo.Context) error {
	counted := false
	if v := c.QueryParam("instances"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return invalid("instances", fmt.Sprintf("instances: must be true or false (got %s)", quote(v)))
		}
		counted = b
	}
	ctx := c.Request().Context()
	ts, err := s.core.Templates(ctx)
	if err != nil {
		return err
	}
	out := wire.TemplateList{Templates: make([]wire.TemplateListed, len(ts))}
	for i, t := range ts {
		out.Templates[i] = wire.TemplateListed{Template: wire.Template(t)}
		if counted {
			n, _, err := s.core.CachedInstances(ctx, t)
			if err != nil {
				return err
			}
			out.Templates[i].Instances = &n
		}
	}
	return c.JSON(http.StatusOK, out)
}

// topInstances answers a template's busiest instances:
// ?by=refused|granted&limit=N&minutes=M.
func (s *server) topInstances(c echo.Context) error {
	tid, err := templateID(c)
	if err != nil {
		return err
	}
	by := cmp.Or(c.QueryParam("by"), "refused")
	limit, err := intParam(c, "limit", core.DefaultTopLimit, core.MaxTopLimit)
	if err != nil {
		return err
	}
	minutes, err := intParam(c, "minutes", core.DefaultTopMinutes, core.MaxTopMinutes)
	if err != nil {
		return err
	}
	top, err := s.core.Top(c.Request().Context(), tid, by, limit, minutes)
	if err != nil {
		return err
	}
	out := wire.Top{By: by, Since: top.Since, Instances: make([]wire.TopInstance, len(top.Instances))}
	for i, t := range top.Instances {
		out.Instances[i] = wire.TopInstance(t)
	}
	return c.JSON(http.StatusOK, out)
}

// intParam reads the query parameter name, from 1 to most; def when absent.
func intParam(c echo.Context, name string, def, most int) (int, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, invalid(name, fmt.Sprintf("%s: must be an integer ≥ 1 and ≤ %d (got %s)", name, most, quote(v)))
	}
	return n, nil
}
