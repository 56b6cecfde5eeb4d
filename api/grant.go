package api

import (
	"container/list"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Grants: what a client pool over HTTP (client.NewHTTP) takes from a
// schedule in one call and dispenses locally. POST .../grant answers the
// store.Grant a pool needs; POST .../handback gives a grant's last permits
// back.
//
// A store.Grant carries an unexported epoch that store.Release needs and that
// nothing outside the store can set, so a grant cannot be rebuilt from its
// JSON. The server keeps each grant it issued for a while instead (grantBook)
// under the id its JSON carries, and hands back the grant it kept. A
// handback the server no longer knows (issued by another replica, before a
// restart, or longer ago than grantKeep) returns nothing: those permits count
// as used, which never lets more through than the limit.

// grantRequest is the body of POST .../grant.
type grantRequest struct {
	Permits *int64            `json:"permits"`  // required, ≥ 1
	MaxWait *limiter.Duration `json:"max_wait"` // default unlimited; negative is 0
}

// sliceView is a limiter.Slice: whole + frac/den ns per permit.
type sliceView struct {
	Whole int64 `json:"whole"`
	Frac  int64 `json:"frac"`
	Den   int64 `json:"den"`
}

// burstValue is a burst ratio in JSON: a number, or "inf".
type burstValue float64

func (b burstValue) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(b), 1) {
		return []byte(`"inf"`), nil
	}
	return strconv.AppendFloat(nil, float64(b), 'g', -1, 64), nil
}

func (b *burstValue) UnmarshalJSON(p []byte) error {
	var s string
	if json.Unmarshal(p, &s) == nil {
		if s != "inf" && s != "+inf" {
			return fmt.Errorf("burst: must be a number or \"inf\" (got %q)", s)
		}
		*b = burstValue(math.Inf(1))
		return nil
	}
	var f float64
	if err := json.Unmarshal(p, &f); err != nil {
		return err
	}
	*b = burstValue(f)
	return nil
}

// GrantView is a granted POST .../grant, and the grant a handback names.
type grantView struct {
	ID        string       `json:"id"` // the server's handle on the grant, for handback
	Granted   bool         `json:"granted"`
	Permits   int64        `json:"permits"`
	Scheduled int64        `json:"scheduled_ns"`
	Start     int64        `json:"start_ns"`
	Delay     int64        `json:"delay_ns"`
	Lateness  int64        `json:"lateness_ns"`
	Wait      int64        `json:"wait_ns"`
	Version   int64        `json:"version"`
	Now       int64        `json:"now_ns"`
	Kind      limiter.Kind `json:"kind"`
	Slice     sliceView    `json:"slice"`
	Burst     burstValue   `json:"burst"`
	RemBefore int64        `json:"rem_before"`
	End       int64        `json:"end_ns"`
}

func viewOf(id string, g store.Grant) grantView {
	return grantView{ID: id, Granted: true, Permits: g.Permits, Scheduled: g.Scheduled, Start: g.Start,
		Delay: g.Delay, Lateness: g.Lateness, Wait: g.Wait, Version: g.Version, Now: g.Now, Kind: g.Kind,
		Slice: sliceView{Whole: g.Slice.Whole, Frac: g.Slice.Frac, Den: g.Slice.Den}, Burst: burstValue(g.Burst),
		RemBefore: g.RemBefore, End: g.End}
}

// handbackRequest is the body of POST .../handback.
type handbackRequest struct {
	Grant   *grantView `json:"grant"`   // as POST .../grant answered it
	Permits *int64     `json:"permits"` // the grant's last permits handed back
}

// grant takes permits for a client pool: 200 with the grant, or 429 (as
// acquire) when they would come later than max_wait.
func (s *server) grant(c echo.Context) error {
	n := c.Param("name")
	b, err := readBody(c)
	if err != nil {
		return err
	}
	var req grantRequest
	if err := decodeStrict(b, &req, ""); err != nil {
		return err
	}
	if req.Permits == nil {
		return invalid("permits", "permits: is required: how many permits the pool takes")
	}
	if *req.Permits < 1 {
		return invalid("permits", fmt.Sprintf("permits: must be ≥ 1 (got %d)", *req.Permits))
	}
	maxWait := store.Forever
	if req.MaxWait != nil {
		maxWait = max(0, time.Duration(*req.MaxWait))
	}
	ctx := c.Request().Context()
	start := time.Now()
	g, err := s.store.Grant(ctx, n, *req.Permits, maxWait)
	s.m.redisDone(opGrant, start)
	if err != nil {
		return err
	}
	if answered, err := s.decided(c, n, g.Decision); answered {
		return err
	}
	return c.JSON(http.StatusOK, viewOf(s.grants.add(g), g))
}

// handback gives a grant's last permits back: the schedule is rewound when
// nothing was taken since (rewound: true), else their time counts as idle.
func (s *server) handback(c echo.Context) error {
	n := c.Param("name")
	b, err := readBody(c)
	if err != nil {
		return err
	}
	var req handbackRequest
	if err := decodeStrict(b, &req, ""); err != nil {
		return err
	}
	if req.Grant == nil {
		return invalid("grant", "grant: is required: the grant as POST .../grant answered it")
	}
	if req.Permits == nil {
		return invalid("permits", "permits: is required: how many of the grant's last permits go back")
	}
	m := *req.Permits
	if m < 1 || m > req.Grant.Permits {
		return invalid("permits", fmt.Sprintf("permits: must be ≥ 1 and at most the grant's %d (got %d)", req.Grant.Permits, m))
	}
	if err := store.CheckName(n); err != nil {
		return err
	}
	g, ok := s.grants.get(req.Grant.ID)
	if !ok || !req.Grant.Granted {
		// Not issued here, or forgotten: nothing to rewind, the permits
		// count as used.
		return c.JSON(http.StatusOK, map[string]bool{"rewound": false})
	}
	if g.Name != n || g.Permits != req.Grant.Permits {
		return invalid("grant.id", fmt.Sprintf("grant.id: grant %s is not a grant of %d permits of limiter %q", quoteShort(req.Grant.ID), req.Grant.Permits, n))
	}
	if req.Grant.Version != g.Version {
		// A client presents a grant as of no current version to have the
		// permits counted as idle instead of rewound (a permit from the
		// middle of the grant).
		g.Version = -1
	}
	ctx := c.Request().Context()
	start := time.Now()
	rewound, err := s.store.Release(ctx, g, m)
	s.m.redisDone(opHandback, start)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]bool{"rewound": rewound})
}

// grantKeep is how long after its end (or its issue, if later) the server
// keeps a grant for its handback; maxGrants bounds how many it keeps.
const (
	grantKeep = 2 * time.Minute
	maxGrants = 1 << 16
)

// grantBook keeps the grants issued, by id, oldest first.
type grantBook struct {
	mu    sync.Mutex
	ids   map[string]*list.Element
	order list.List // of *kept
}

type kept struct {
	id    string
	g     store.Grant
	until time.Time
}

var errNoID = errors.New("api: no random source for grant ids")

func newGrantID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("%w: %w", errNoID, err)
	}
	return hex.EncodeToString(b[:]), nil
}

// add keeps g and returns its id ("" if none could be made: the grant then
// cannot be handed back).
func (b *grantBook) add(g store.Grant) string {
	id, err := newGrantID()
	if err != nil {
		return ""
	}
	now := time.Now()
	until := now.Add(grantKeep)
	if end := time.Unix(0, g.End).Add(grantKeep); end.After(until) {
		until = end
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ids == nil {
		b.ids = map[string]*list.Element{}
	}
	for e := b.order.Front(); e != nil; e = b.order.Front() {
		k := e.Value.(*kept)
		if b.order.Len() < maxGrants && k.until.After(now) {
			break
		}
		b.order.Remove(e)
		delete(b.ids, k.id)
	}
	b.ids[id] = b.order.PushBack(&kept{id: id, g: g, until: until})
	return id
}

// get returns the grant kept under id.
func (b *grantBook) get(id string) (store.Grant, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.ids[id]
	if !ok || !e.Value.(*kept).until.After(time.Now()) {
		return store.Grant{}, false
	}
	return e.Value.(*kept).g, true
}
