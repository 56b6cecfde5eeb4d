package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// templateRequest is the body of PUT /v1/templates/{id}. id and version are
// accepted so that what GET answered can be PUT back: id must then equal the
// path's, version is read-only and ignored.
type templateRequest struct {
	ID      *string           `json:"id"`
	Pattern string            `json:"pattern"`
	Order   int               `json:"order"`
	IdleTTL *limiter.Duration `json:"idle_ttl"`
	Limiter json.RawMessage   `json:"limiter"`
	Version *int64            `json:"version"`
}

// id returns the {id} path parameter, checked.
func id(c echo.Context) (string, error) {
	v := c.Param("id")
	if err := store.CheckName(v); err != nil {
		return v, invalid("id", fmt.Sprintf("id: must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$ (got %q)", v))
	}
	return v, nil
}

// putTemplate creates (201) or replaces (200) a template.
func (s *server) putTemplate(c echo.Context) error {
	tid, err := id(c)
	if err != nil {
		return err
	}
	b, err := readBody(c)
	if err != nil {
		return err
	}
	var req templateRequest
	if err := decodeStrict(b, &req, ""); err != nil {
		return err
	}
	if req.ID != nil && *req.ID != tid {
		return invalid("id", fmt.Sprintf("id: must be left out or equal the id in the path, %q (got %q)", tid, *req.ID))
	}
	if len(req.Limiter) == 0 || isNull(req.Limiter) {
		return invalid("limiter", "limiter: is required: the config of the limiters the template makes")
	}
	var cfg limiter.Config
	if err := decodeStrict(req.Limiter, &cfg, "limiter"); err != nil {
		return err
	}
	ctx := c.Request().Context()
	start := time.Now()
	_, err = s.store.GetTemplate(ctx, tid)
	s.m.redisDone(opGetTemplate, start)
	created := errors.Is(err, store.ErrNotFound)
	if err != nil && !created {
		return err
	}
	start = time.Now()
	t, err := s.store.PutTemplate(ctx, store.Template{ID: tid, Pattern: req.Pattern, Order: req.Order, IdleTTL: req.IdleTTL, Limiter: cfg})
	s.m.redisDone(opPutTemplate, start)
	if err != nil {
		return specFault(err, cfg.Spec, "limiter")
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		c.Response().Header().Set(echo.HeaderLocation, "/v1/templates/"+tid)
	}
	return c.JSON(status, t)
}

func (s *server) getTemplate(c echo.Context) error {
	tid, err := id(c)
	if err != nil {
		return err
	}
	start := time.Now()
	t, err := s.store.GetTemplate(c.Request().Context(), tid)
	s.m.redisDone(opGetTemplate, start)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (s *server) deleteTemplate(c echo.Context) error {
	tid, err := id(c)
	if err != nil {
		return err
	}
	start := time.Now()
	err = s.store.DeleteTemplate(c.Request().Context(), tid)
	s.m.redisDone(opDeleteTemplate, start)
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// listTemplates answers every template in matching order.
func (s *server) listTemplates(c echo.Context) error {
	start := time.Now()
	ts, err := s.store.Templates(c.Request().Context())
	s.m.redisDone(opTemplates, start)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, struct {
		Templates []store.Template `json:"templates"`
	}{ts})
}
