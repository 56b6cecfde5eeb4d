package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/wire"
)

// capacity asks a share limiter for capacity on behalf of one client.
func (s *server) capacity(c echo.Context) error {
	var req wire.CapacityRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.ClientID == nil {
		return required("client_id", "the id the client asks under, the same in every request")
	}
	if err := limitd.CheckNameAs("client_id", *req.ClientID); err != nil {
		return err
	}
	if req.Wants == nil {
		return required("wants", "the capacity the client would use")
	}
	r := core.CapacityRequest{Name: c.Param("name"), ClientID: *req.ClientID, Wants: *req.Wants}
	if req.Has != nil {
		r.Has = *req.Has
	}
	if req.Priority != nil {
		r.Priority = *req.Priority
	}
	l, err := s.core.Capacity(c.Request().Context(), r)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.CapacityLease{Gets: l.Gets, Expires: l.Expires, Refresh: l.Refresh,
		SafeCapacity: l.SafeCapacity, Learning: l.Learning, Version: l.Version})
}

// returnCapacity ends a client's lease at once, freeing its capacity: 204,
// or 404 naming client_id when the client holds none.
func (s *server) returnCapacity(c echo.Context) error {
	if err := s.core.ReturnCapacity(c.Request().Context(), c.Param("name"), c.Param("client_id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
