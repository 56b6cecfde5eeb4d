package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// limiterView is a limiter as GET, PUT and PATCH answer it; List leaves out
// State.
type limiterView struct {
	Name    string         `json:"name"`
	Config  limiter.Config `json:"config"` // canonical: every default filled in
	Version int64          `json:"version"`
	State   *waitState     `json:"state,omitempty"`
}

// waitState is a limiter's live state, the answer of GET .../wait.
type waitState struct {
	Wait      int64 `json:"wait_ns"`      // backlog (smooth: stored time)
	Delay     int64 `json:"delay_ns"`     // how long a new caller would wait now
	Idle      int64 `json:"idle_ns"`      // total time forfeited
	Allocated int64 `json:"allocated_ns"` // total time granted
	Now       int64 `json:"now_ns"`       // Redis time, Unix ns
	Version   int64 `json:"version"`
	Permits   int64 `json:"permits"`     // total permits granted
	Lateness  int64 `json:"lateness_ns"` // total lateness of granted requests
	Started   bool  `json:"started"`     // false until the first permit
}

func stateOf(w store.WaitInfo) *waitState {
	return &waitState{Wait: w.Wait, Delay: w.Delay, Idle: w.Idle, Allocated: w.Allocated, Now: w.Now,
		Version: w.Version, Permits: w.Permits, Lateness: w.Lateness, Started: w.Started}
}

// view answers a limiter with its live state. Share and concurrency
// limiters have no schedule, so no state: their view leaves it out.
func (s *server) view(c echo.Context, status int, info store.Info) error {
	if !scheduled(info.Config.Kind) {
		return c.JSON(status, limiterView{Name: info.Name, Config: info.Config, Version: info.Version})
	}
	ctx := c.Request().Context()
	start := time.Now()
	w, err := s.store.Wait(ctx, info.Name)
	s.m.redisDone(opWait, start)
	if err != nil {
		return err
	}
	return c.JSON(status, limiterView{Name: info.Name, Config: info.Config, Version: info.Version, State: stateOf(w)})
}

// putLimiter creates (201) or replaces (200) a limiter; see store.Put.
func (s *server) putLimiter(c echo.Context) error {
	n := c.Param("name") // every store call checks the name first
	b, err := readBody(c)
	if err != nil {
		return err
	}
	var cfg limiter.Config
	if err := decodeStrict(b, &cfg, ""); err != nil {
		return err
	}
	start := time.Now()
	info, created, err := s.store.Put(c.Request().Context(), n, cfg)
	s.m.redisDone(opPut, start)
	if err != nil {
		return specFault(err, cfg.Spec, "")
	}
	s.slots.set(n, info.Config.Kind == limiter.KindConcurrency)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		c.Response().Header().Set(echo.HeaderLocation, "/v1/limiters/"+n)
	}
	return s.view(c, status, info)
}

func (s *server) getLimiter(c echo.Context) error {
	n := c.Param("name")
	start := time.Now()
	info, err := s.store.Get(c.Request().Context(), n)
	s.m.redisDone(opGet, start)
	if err != nil {
		return err
	}
	return s.view(c, http.StatusOK, info)
}

// patchLimiter applies a JSON merge patch to the limiter's canonical config
// and reconfigures it in place; a kind change is 409 (PUT replaces).
func (s *server) patchLimiter(c echo.Context) error {
	n := c.Param("name")
	b, err := readBody(c)
	if err != nil {
		return err
	}
	var patch map[string]json.RawMessage
	if err := decodeStrict(b, &patch, ""); err != nil {
		return err
	}
	if patch == nil {
		return invalid("", "a merge patch must be a JSON object")
	}
	start := time.Now()
	info, err := s.store.Patch(c.Request().Context(), n, func(cur limiter.Config) (limiter.Config, error) {
		next, err := mergePatch(cur, patch)
		if err != nil {
			return limiter.Config{}, err
		}
		if k := cmp.Or(next.Kind, limiter.KindSchedule); k != cur.Kind {
			return limiter.Config{}, fmt.Errorf("%w: PATCH cannot change the kind of limiter %q from %s to %s; PUT a %s config to replace it",
				store.ErrConflict, n, cur.Kind, k, k)
		}
		if _, _, err := next.Normalize(); err != nil {
			return limiter.Config{}, specFault(err, next.Spec, "")
		}
		return next, nil
	})
	s.m.redisDone(opPatch, start)
	if err != nil {
		return err
	}
	return s.view(c, http.StatusOK, info)
}

func (s *server) deleteLimiter(c echo.Context) error {
	n := c.Param("name")
	start := time.Now()
	err := s.store.Delete(c.Request().Context(), n)
	s.m.redisDone(opDelete, start)
	if err != nil {
		return err
	}
	s.m.backlog.DeleteLabelValues(n)
	s.slots.set(n, false)
	return c.NoContent(http.StatusNoContent)
}

// listLimiters answers one page of limiters in name order.
func (s *server) listLimiters(c echo.Context) error {
	limit := defaultListLimit
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxListLimit {
			return invalid("limit", fmt.Sprintf("limit: must be an integer ≥ 1 and ≤ %d (got %q)", store.MaxListLimit, v))
		}
		limit = n
	}
	cursor := c.QueryParam("cursor")
	if cursor != "" && store.CheckName(cursor) != nil {
		return invalid("cursor", fmt.Sprintf("cursor: must be the \"next\" of the previous page, a limiter name (got %q)", cursor))
	}
	start := time.Now()
	infos, next, err := s.store.List(c.Request().Context(), cursor, limit)
	s.m.redisDone(opList, start)
	if err != nil {
		return err
	}
	out := struct {
		Limiters []limiterView `json:"limiters"`
		Next     string        `json:"next"`
	}{Limiters: make([]limiterView, len(infos)), Next: next}
	for i, info := range infos {
		out.Limiters[i] = limiterView{Name: info.Name, Config: info.Config, Version: info.Version}
	}
	return c.JSON(http.StatusOK, out)
}

// acquireRequest is the body of POST .../acquire; every field is optional.
// A concurrency limiter's acquire takes none of them.
type acquireRequest struct {
	Permits *int64            `json:"permits"`  // default 1
	MaxWait *limiter.Duration `json:"max_wait"` // default unlimited; negative is 0
	Block   *bool             `json:"block"`    // wait out the delay before answering
}

// field returns the first field the request set ("" for an empty body or
// {}), the one a concurrency acquire rejects.
func (r *acquireRequest) field() string {
	switch {
	case r.Permits != nil:
		return "permits"
	case r.MaxWait != nil:
		return "max_wait"
	case r.Block != nil:
		return "block"
	}
	return ""
}

type granted struct {
	Granted   bool  `json:"granted"`
	Permits   int64 `json:"permits"`
	Delay     int64 `json:"delay_ns"`
	Scheduled int64 `json:"scheduled_ns"`
	Start     int64 `json:"start_ns"`
	Lateness  int64 `json:"lateness_ns"`
	Wait      int64 `json:"wait_ns"`
	Version   int64 `json:"version"`
	Now       int64 `json:"now_ns"`
}

// denied adds to the contract's retry_after_ns what the decision knew: the
// delay the request would have had, the backlog, version and time.
type denied struct {
	Granted    bool  `json:"granted"`
	RetryAfter int64 `json:"retry_after_ns"`
	Delay      int64 `json:"delay_ns"`
	Wait       int64 `json:"wait_ns"`
	Version    int64 `json:"version"`
	Now        int64 `json:"now_ns"`
}

// blockMargin is kept from a blocking acquire's deadline for the answer.
const blockMargin = 20 * time.Millisecond

// acquire dispatches on the limiter's kind: schedule and smooth limiters
// (and template instances) take permits, concurrency limiters a slot; a
// share limiter is 409 (its clients ask for capacity). A name this process
// saw to be a concurrency limiter goes to the slot first; any other is tried
// as a schedule first and, when the store answers that it has another
// kind, looked up once.
func (s *server) acquire(c echo.Context) error {
	n := c.Param("name")
	b, err := readBody(c)
	if err != nil {
		return err
	}
	var req acquireRequest
	if len(b) > 0 {
		if err := decodeStrict(b, &req, ""); err != nil {
			return err
		}
	}
	if req.field() == "" && s.slots.has(n) {
		l, err := s.acquireSlot(c, n)
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			return s.slotAnswer(c, n, l, err)
		}
		s.slots.set(n, false) // replaced or deleted since: ask as for any name
	}
	block := req.Block != nil && *req.Block
	permits := int64(1)
	if req.Permits != nil {
		permits = *req.Permits
	}
	if permits < 1 {
		return invalid("permits", fmt.Sprintf("permits: must be ≥ 1 (got %d)", permits))
	}
	maxWait := store.Forever
	if req.MaxWait != nil {
		maxWait = max(0, time.Duration(*req.MaxWait))
	}
	ctx := c.Request().Context()
	if dl, ok := ctx.Deadline(); ok && block {
		// A grant the server could not wait out before the deadline would
		// take permits nobody uses: ask only for what fits.
		maxWait = min(maxWait, max(0, time.Until(dl)-blockMargin))
	}
	start := time.Now()
	d, err := s.store.Acquire(ctx, n, permits, maxWait)
	s.m.redisDone(opAcquire, start)
	if errors.Is(err, store.ErrConflict) {
		return s.acquireOther(c, n, &req, err)
	}
	if err != nil {
		return err
	}
	if answered, err := s.decided(c, n, d); answered {
		return err
	}
	if block && d.Delay > 0 {
		t := time.NewTimer(time.Duration(d.Delay))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return c.JSON(http.StatusOK, granted{Granted: true, Permits: d.Permits, Delay: d.Delay, Scheduled: d.Scheduled,
		Start: d.Start, Lateness: d.Lateness, Wait: d.Wait, Version: d.Version, Now: d.Now})
}

func (s *server) wait(c echo.Context) error {
	n := c.Param("name")
	ctx := c.Request().Context()
	start := time.Now()
	w, err := s.store.Wait(ctx, n)
	s.m.redisDone(opWait, start)
	if err != nil {
		return err
	}
	if lim, _ := s.subjectOf(ctx, n, w.Instance); lim != "" {
		s.m.backlog.WithLabelValues(lim).Set(float64(w.Wait) / 1e9)
	}
	return c.JSON(http.StatusOK, stateOf(w))
}

// reset starts a new schedule now and answers the state after it.
func (s *server) reset(c echo.Context) error {
	n := c.Param("name")
	ctx := c.Request().Context()
	start := time.Now()
	_, err := s.store.Reset(ctx, n)
	s.m.redisDone(opReset, start)
	if err != nil {
		return err
	}
	start = time.Now()
	w, err := s.store.Wait(ctx, n)
	s.m.redisDone(opWait, start)
	if err != nil {
		return err
	}
	if lim, _ := s.subjectOf(ctx, n, w.Instance); lim != "" {
		s.m.backlog.WithLabelValues(lim).Set(float64(w.Wait) / 1e9)
	}
	return c.JSON(http.StatusOK, stateOf(w))
}

// setRetryAfter sets the Retry-After header: ns in whole seconds, rounded
// up.
func setRetryAfter(c echo.Context, ns int64) {
	c.Response().Header().Set("Retry-After", strconv.FormatInt((max(ns, 0)+1e9-1)/1e9, 10))
}

// subject returns the labels a decision on name is counted under: the
// limiter's own name, or the id of the template whose instance answered.
// An instance name (user:42) never becomes a label. It costs a round trip
// only when a template matches name.
// subjectOf names the metric subject of a rate decision whose reply said
// whether a template instance answered: the limiter's name, or the template's
// id (never an instance's name). It costs no round trip.
func (s *server) subjectOf(ctx context.Context, name string, instance bool) (lim, tpl string) {
	if !instance {
		return name, ""
	}
	if t, err := s.store.Resolve(ctx, name); err == nil {
		return "", t.ID
	}
	return "", ""
}

// decided records a rate decision (acquire or grant) in the metrics and
// answers a refused one with 429; answered says whether it answered.
func (s *server) decided(c echo.Context, name string, d store.Decision) (answered bool, err error) {
	lim, tpl := s.subjectOf(c.Request().Context(), name, d.Instance)
	if lim != "" {
		s.m.backlog.WithLabelValues(lim).Set(float64(d.Wait) / 1e9)
	}
	if !d.Granted {
		s.m.decisions.WithLabelValues(lim, tpl, "denied").Inc()
		setRetryAfter(c, d.RetryAfter)
		return true, c.JSON(http.StatusTooManyRequests, denied{RetryAfter: d.RetryAfter, Delay: d.Delay, Wait: d.Wait, Version: d.Version, Now: d.Now})
	}
	s.m.decisions.WithLabelValues(lim, tpl, "granted").Inc()
	return false, nil
}

// subject is subjectOf for kinds whose replies do not say whether a template
// instance answered (share, concurrency): it asks Redis when a template
// matches the name.
func (s *server) subject(ctx context.Context, name string) (lim, tpl string) {
	t, err := s.store.Resolve(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return name, "" // no template matches: only a limiter could have answered
	}
	if err != nil {
		return "", "" // unknown; never the name, which may be an instance's
	}
	start := time.Now()
	_, err = s.store.Get(ctx, name) // a limiter of that name comes before templates
	s.m.redisDone(opGet, start)
	if err == nil {
		return name, ""
	}
	return "", t.ID
}
