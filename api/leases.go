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

// release frees a lease's slot: 204, or 404 naming lease_id when the
// limiter does not hold it (released already, or expired and reclaimed).
func (s *server) release(c echo.Context) error {
	id, err := leaseID(c)
	if err != nil {
		return err
	}
	if err := s.core.ReleaseSlot(c.Request().Context(), c.Param("name"), id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// renew extends a held lease by the limiter's lease time: 200, or 404
// naming lease_id when the lease is lost (the holder must stop and acquire
// again).
func (s *server) renew(c echo.Context) error {
	id, err := leaseID(c)
	if err != nil {
		return err
	}
	l, err := s.core.RenewSlot(c.Request().Context(), c.Param("name"), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.Renewed{LeaseID: l.ID, Expires: l.Expires})
}

// leaseID reads the body of release and renew; core checks the id.
func leaseID(c echo.Context) (string, error) {
	b, err := readBody(c)
	if err != nil {
		return "", err
	}
	if len(b) == 0 {
		return "", required("lease_id", `send {"lease_id":"<the lease_id the acquire answered>"}`)
	}
	var req wire.LeaseRequest
	if err := decodeStrict(b, &req, ""); err != nil {
		return "", err
	}
	if req.LeaseID == nil {
		return "", required("lease_id", "the lease_id the acquire answered")
	}
	return *req.LeaseID, nil
}
