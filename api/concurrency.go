package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Concurrency limiters: a distributed semaphore. POST .../acquire takes a
// slot and answers its lease, which the holder renews before it expires and
// releases when done; an expired lease's slot is reclaimed.

// slotGranted answers a granted concurrency acquire.
type slotGranted struct {
	Granted bool   `json:"granted"`
	LeaseID string `json:"lease_id"`
	Expires int64  `json:"expires_ns"`
	InUse   int64  `json:"in_use"` // slots held, this one included
	Limit   int64  `json:"limit"`
}

// slotDenied answers a concurrency acquire when every slot is held.
type slotDenied struct {
	Granted    bool  `json:"granted"`
	RetryAfter int64 `json:"retry_after_ns"` // until the earliest lease expires
	InUse      int64 `json:"in_use"`
	Limit      int64 `json:"limit"`
}

// leaseRequest is the body of POST .../release and .../renew.
type leaseRequest struct {
	LeaseID *string `json:"lease_id"`
}

type renewed struct {
	LeaseID string `json:"lease_id"`
	Expires int64  `json:"expires_ns"`
}

// leaseIDLen is the length of a lease id: the store makes 16 random bytes
// in lowercase hex.
const leaseIDLen = 32

// scheduled reports whether limiters of kind k have a schedule (and so a
// live state, acquire of permits, wait and reset).
func scheduled(k limiter.Kind) bool {
	return k != limiter.KindShare && k != limiter.KindConcurrency
}

// slotHints remembers which names this process saw to be concurrency
// limiters, so that their acquire goes to the slot in one round trip. A hint
// is only a guess: the store answers ErrConflict or ErrNotFound when it is
// stale, and the acquire then starts over as for any name.
type slotHints struct {
	mu    sync.Mutex
	names map[string]struct{}
}

// maxSlotHints bounds the hints; past it they start over.
const maxSlotHints = 4096

func (h *slotHints) has(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.names[name]
	return ok
}

func (h *slotHints) set(name string, concurrency bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !concurrency:
		delete(h.names, name)
	case h.names == nil:
		h.names = map[string]struct{}{name: {}}
	default:
		if len(h.names) >= maxSlotHints {
			clear(h.names)
		}
		h.names[name] = struct{}{}
	}
}

// acquireOther finishes an acquire the store refused as a schedule acquire
// (conflict): a concurrency limiter gets a slot, anything else (a share
// limiter) the store's 409, which names the right endpoint.
func (s *server) acquireOther(c echo.Context, n string, req *acquireRequest, conflict error) error {
	ctx := c.Request().Context()
	start := time.Now()
	info, err := s.store.Get(ctx, n)
	s.m.redisDone(opGet, start)
	if err != nil {
		return err
	}
	if info.Config.Kind != limiter.KindConcurrency {
		return conflict
	}
	if f := req.field(); f != "" {
		return invalid(f, fmt.Sprintf("%s: is not a setting of a concurrency limiter's acquire: %q is a concurrency limiter, whose acquire takes an empty body or {}", f, n))
	}
	s.slots.set(n, true)
	l, err := s.acquireSlot(c, n)
	return s.slotAnswer(c, n, l, err)
}

func (s *server) acquireSlot(c echo.Context, n string) (store.SlotLease, error) {
	start := time.Now()
	l, err := s.store.AcquireSlot(c.Request().Context(), n)
	s.m.redisDone(opAcquireSlot, start)
	return l, err
}

// slotAnswer answers a concurrency acquire: 200 with the lease, or 429 with
// Retry-After when every slot is held.
func (s *server) slotAnswer(c echo.Context, n string, l store.SlotLease, err error) error {
	if err != nil {
		return err
	}
	lim, tpl := s.subject(c.Request().Context(), n)
	if !l.Granted {
		s.m.slots.WithLabelValues(lim, tpl, "denied").Inc()
		setRetryAfter(c, l.RetryAfter)
		return c.JSON(http.StatusTooManyRequests, slotDenied{RetryAfter: max(l.RetryAfter, 0), InUse: l.InUse, Limit: l.Limit})
	}
	s.m.slots.WithLabelValues(lim, tpl, "granted").Inc()
	return c.JSON(http.StatusOK, slotGranted{Granted: true, LeaseID: l.ID, Expires: l.Expires, InUse: l.InUse, Limit: l.Limit})
}

// release frees a lease's slot: 204, or 404 naming lease_id when the
// limiter does not hold it (released already, or expired and reclaimed).
func (s *server) release(c echo.Context) error {
	n := c.Param("name")
	id, err := leaseID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	start := time.Now()
	err = s.store.ReleaseSlot(ctx, n, id)
	s.m.redisDone(opReleaseSlot, start)
	if errors.Is(err, store.ErrNotFound) {
		return s.notHeld(ctx, n, err, "lease_id", "lost",
			fmt.Sprintf("lease_id: limiter %q holds no lease %q: it was released already, or it expired and its slot was reclaimed", n, id))
	}
	if err != nil {
		return err
	}
	lim, tpl := s.subject(ctx, n)
	s.m.leases.WithLabelValues(lim, tpl, "released").Inc()
	return c.NoContent(http.StatusNoContent)
}

// renew extends a held lease by the limiter's lease time: 200, or 404
// naming lease_id when the lease is lost (the holder must stop and acquire
// again).
func (s *server) renew(c echo.Context) error {
	n := c.Param("name")
	id, err := leaseID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	start := time.Now()
	l, err := s.store.RenewSlot(ctx, n, id)
	s.m.redisDone(opRenewSlot, start)
	if errors.Is(err, store.ErrNotFound) {
		return s.notHeld(ctx, n, err, "lease_id", "lost",
			fmt.Sprintf("lease_id: limiter %q holds no lease %q: it was released, or it expired before this renewal and its slot may be taken; stop using it and acquire again", n, id))
	}
	if err != nil {
		return err
	}
	lim, tpl := s.subject(ctx, n)
	s.m.leases.WithLabelValues(lim, tpl, "renewed").Inc()
	return c.JSON(http.StatusOK, renewed{LeaseID: id, Expires: l.Expires})
}

// notHeld turns the store's ErrNotFound for a lease into a 404 naming field
// when the limiter exists (the lease or client is what is missing); when
// the limiter does not, the store's own 404 stands. event, if not empty, is
// counted in limitd_slot_lease_events_total.
func (s *server) notHeld(ctx context.Context, n string, err error, field, event, detail string) error {
	start := time.Now()
	_, gerr := s.store.Get(ctx, n)
	s.m.redisDone(opGet, start)
	if gerr != nil {
		return err
	}
	if event != "" {
		lim, tpl := s.subject(ctx, n)
		s.m.leases.WithLabelValues(lim, tpl, event).Inc()
	}
	p := newProblem(http.StatusNotFound, "not-found", detail)
	p.Field = field
	p.cause = err
	return p
}

// leaseID reads the body of release and renew.
func leaseID(c echo.Context) (string, error) {
	b, err := readBody(c)
	if err != nil {
		return "", err
	}
	if len(b) == 0 {
		return "", invalid("lease_id", `lease_id: is required: send {"lease_id":"<the lease_id the acquire answered>"}`)
	}
	var req leaseRequest
	if err := decodeStrict(b, &req, ""); err != nil {
		return "", err
	}
	if req.LeaseID == nil {
		return "", invalid("lease_id", "lease_id: is required: the lease_id the acquire answered")
	}
	if err := checkLeaseID(*req.LeaseID); err != nil {
		return "", err
	}
	return *req.LeaseID, nil
}

// checkLeaseID: a lease id is 32 lowercase hex digits, as the store makes
// them (and checks them).
func checkLeaseID(id string) error {
	ok := len(id) == leaseIDLen
	for i := 0; ok && i < len(id); i++ {
		ok = id[i] >= '0' && id[i] <= '9' || id[i] >= 'a' && id[i] <= 'f'
	}
	if !ok {
		return invalid("lease_id", fmt.Sprintf("lease_id: must be the lease_id an acquire answered: %d lowercase hex digits (got %s)", leaseIDLen, quoteShort(id)))
	}
	return nil
}

// quoteShort quotes s for a problem's detail, cut to 40 bytes.
func quoteShort(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q… (%d bytes)", s[:40], len(s))
	}
	return fmt.Sprintf("%q", s)
}
