package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/store"
)

// Share limiters (Doorman): a capacity divided among clients by lease. A
// client asks with what it wants and what it has, uses what it gets until
// the lease expires, asks again every refresh_ns, and gives its capacity
// back when it leaves.

// capacityRequest is the body of POST .../capacity; client_id and wants are
// required.
type capacityRequest struct {
	ClientID *string  `json:"client_id"`
	Wants    *float64 `json:"wants"`
	Has      *float64 `json:"has"`      // default 0
	Priority *float64 `json:"priority"` // default 0, which counts as 1
}

// capacityLease answers a capacity request.
type capacityLease struct {
	Gets         float64 `json:"gets"`
	Expires      int64   `json:"expires_ns"`
	Refresh      int64   `json:"refresh_ns"`
	SafeCapacity float64 `json:"safe_capacity"`
	Learning     bool    `json:"learning"`
	Version      int64   `json:"version"`
}

// check returns the store's request, or a 400 naming the field at fault.
// The store checks the same rules; checking here first keeps bad input away
// from Redis whatever the store does.
func (r *capacityRequest) check() (store.CapacityRequest, error) {
	if r.ClientID == nil {
		return store.CapacityRequest{}, invalid("client_id", "client_id: is required: the id the client asks under, the same in every request")
	}
	if err := checkClientID(*r.ClientID); err != nil {
		return store.CapacityRequest{}, err
	}
	if r.Wants == nil {
		return store.CapacityRequest{}, invalid("wants", "wants: is required: the capacity the client would use")
	}
	out := store.CapacityRequest{ClientID: *r.ClientID}
	for _, f := range []struct {
		name string
		v    *float64
		to   *float64
	}{{"wants", r.Wants, &out.Wants}, {"has", r.Has, &out.Has}, {"priority", r.Priority, &out.Priority}} {
		if f.v == nil {
			continue
		}
		if v := *f.v; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return store.CapacityRequest{}, invalid(f.name, fmt.Sprintf("%s: must be a finite number ≥ 0 (got %v)", f.name, v))
		}
		*f.to = *f.v
	}
	if out.Priority > store.MaxPriority {
		return store.CapacityRequest{}, invalid("priority", fmt.Sprintf("priority: must be ≥ 0 and ≤ 1e6 (got %v)", out.Priority))
	}
	return out, nil
}

// checkClientID: a client id follows the rules of names.
func checkClientID(id string) error {
	if store.CheckName(id) != nil {
		return invalid("client_id", fmt.Sprintf("client_id: must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$ (got %s)", quoteShort(id)))
	}
	return nil
}

// capacity asks a share limiter for capacity on behalf of one client.
func (s *server) capacity(c echo.Context) error {
	n := c.Param("name")
	b, err := readBody(c)
	if err != nil {
		return err
	}
	var req capacityRequest
	if err := decodeStrict(b, &req, ""); err != nil {
		return err
	}
	r, err := req.check()
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	start := time.Now()
	l, err := s.store.Capacity(ctx, n, r)
	s.m.redisDone(opCapacity, start)
	if err != nil {
		return err
	}
	for _, v := range []float64{l.Gets, l.SafeCapacity} {
		if math.IsNaN(v) || math.IsInf(v, 0) { // JSON cannot carry it: fail before writing
			return fmt.Errorf("api: limiter %q answered a capacity lease that is not finite: %+v", n, l)
		}
	}
	lim, tpl := s.subject(ctx, n)
	s.m.capacity.WithLabelValues(lim, tpl, capacityDecision(r.Wants, l)).Inc()
	return c.JSON(http.StatusOK, capacityLease{Gets: l.Gets, Expires: l.Expires, Refresh: l.Refresh,
		SafeCapacity: l.SafeCapacity, Learning: l.Learning, Version: l.Version})
}

// capacityDecision is the decision label of limitd_capacity_decisions_total.
func capacityDecision(wants float64, l store.CapacityLease) string {
	switch {
	case l.Learning:
		return "learning"
	case l.Gets >= wants:
		return "full"
	case l.Gets > 0:
		return "partial"
	}
	return "none"
}

// returnCapacity ends a client's lease at once, freeing its capacity: 204,
// or 404 naming client_id when the client holds none.
func (s *server) returnCapacity(c echo.Context) error {
	n, id := c.Param("name"), c.Param("client_id")
	if err := checkClientID(id); err != nil {
		return err
	}
	ctx := c.Request().Context()
	start := time.Now()
	err := s.store.ReturnCapacity(ctx, n, id)
	s.m.redisDone(opReturnCapacity, start)
	if errors.Is(err, store.ErrNotFound) {
		return s.notHeld(ctx, n, err, "client_id", "",
			fmt.Sprintf("client_id: client %q holds no capacity of limiter %q: it was returned already, or its lease expired", id, n))
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
