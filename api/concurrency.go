package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/wire"
)

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
