package api

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

// templateID returns the {id} path parameter, checked before the body is
// read.
func templateID(c echo.Context) (string, error) {
	v := c.Param("id")
	return v, core.CheckName("id", v)
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
		core.Template{ID: tid, Pattern: req.Pattern, Order: req.Order, IdleTTL: req.IdleTTL, Limiter: cfg})
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
	return c.JSON(status, templateOf(t))
}

// templateOf is a template as the API answers it.
func templateOf(t core.Template) wire.Template {
	return wire.Template{ID: t.ID, Pattern: t.Pattern, Order: t.Order, IdleTTL: t.IdleTTL, Limiter: t.Limiter, Version: t.Version}
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
	return c.JSON(http.StatusOK, wire.TemplateView{Template: templateOf(t), Instances: n, InstancesExact: exact})
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

// listTemplates answers every template in matching order.
func (s *server) listTemplates(c echo.Context) error {
	ts, err := s.core.Templates(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]wire.Template, len(ts))
	for i, t := range ts {
		out[i] = templateOf(t)
	}
	return c.JSON(http.StatusOK, struct {
		Templates []wire.Template `json:"templates"`
	}{out})
}
