package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

// PutTemplate creates or replaces a template. Every change gets a new,
// higher version, counted per template id (a hash of counters, kept when a
// template is deleted, so that a version its instances' states may carry is
// never repeated); instances move to it on their next use, keeping state.
func (s *Store) PutTemplate(ctx context.Context, t limitd.Template) (limitd.Template, error) {
	t, err := t.Normalize()
	if err != nil {
		return limitd.Template{}, err
	}
	if old, err := s.GetTemplate(ctx, t.ID); err == nil {
		if t.Version = old.Version; equalJSON(old, t) {
			return old, nil
		}
	}
	if t.Version, err = s.rdb.HIncrBy(ctx, s.templateVersionKey(), t.ID, 1).Result(); err != nil {
		return limitd.Template{}, wrapErr(err)
	}
	b, _ := json.Marshal(t)
	if err := s.rdb.HSet(ctx, s.templatesKey(), t.ID, b).Err(); err != nil {
		return limitd.Template{}, wrapErr(err)
	}
	s.templatesChanged(ctx)
	return t, nil
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func (s *Store) templatesChanged(ctx context.Context) {
	s.templates.invalidate()
	s.rdb.Publish(ctx, s.Channel(), "*template* 0") // a hint; caches expire anyway
}

// GetTemplate returns a template, or ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, id string) (limitd.Template, error) {
	b, err := s.rdb.HGet(ctx, s.templatesKey(), id).Bytes()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return limitd.Template{}, fmt.Errorf("template %q: %w", id, ErrNotFound)
		}
		return limitd.Template{}, wrapErr(err)
	}
	var t limitd.Template
	if err := json.Unmarshal(b, &t); err != nil {
		return limitd.Template{}, fmt.Errorf("store: template %q is unreadable: %w", id, err)
	}
	return t, nil
}

// DeleteTemplate removes a template, or returns ErrNotFound. Its instances
// stay until their TTL ends but are no longer reachable by name.
func (s *Store) DeleteTemplate(ctx context.Context, id string) error {
	n, err := s.rdb.HDel(ctx, s.templatesKey(), id).Result()
	if err != nil {
		return wrapErr(err)
	}
	if n == 0 {
		return fmt.Errorf("template %q: %w", id, ErrNotFound)
	}
	s.templatesChanged(ctx)
	return nil
}

// Templates returns every template in matching order: the templates hash
// itself, so a listing holds exactly the templates that exist.
func (s *Store) Templates(ctx context.Context) ([]limitd.Template, error) {
	m, err := s.rdb.HGetAll(ctx, s.templatesKey()).Result()
	if err != nil {
		return nil, wrapErr(err)
	}
	out := make([]limitd.Template, 0, len(m))
	for id, b := range m {
		var t limitd.Template
		if err := json.Unmarshal([]byte(b), &t); err != nil {
			return nil, fmt.Errorf("store: template %q is unreadable: %w", id, err)
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b limitd.Template) int {
		return cmp.Or(cmp.Compare(a.Order, b.Order), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Resolve tells which template a name that is not a limiter would use, or
// ErrNotFound.
func (s *Store) Resolve(ctx context.Context, name string) (limitd.Template, error) {
	t, err := s.templates.match(ctx, s, name)
	if err != nil {
		return limitd.Template{}, err
	}
	if t == nil {
		return limitd.Template{}, fmt.Errorf("no template matches %q: %w", name, ErrNotFound)
	}
	return t.Template, nil
}

type compiledTemplate struct {
	limitd.Template
	argv  []any  // the parameters as the scripts take them, built once
	head  string // acquire.lua's head after the count: version, idle TTL and argv as text
	head1 any    // the head of one request ("1 " + head), built once: most calls are one acquire
}

func (t *compiledTemplate) args() []any {
	if t == nil {
		return nil
	}
	return t.argv
}

// idleTTLms is the idle TTL as lua/lib.lua's settle_ms takes it: the
// template's idle_ttl in ms, or, without one, DefaultIdleTTL in ms, negated
// (at most that long after the debt).
func (t *compiledTemplate) idleTTLms() int64 {
	if t == nil {
		return 0
	}
	if t.IdleTTL == nil {
		return -limitd.DefaultIdleTTL.Milliseconds()
	}
	return max(1, time.Duration(*t.IdleTTL).Milliseconds())
}

// templateCache keeps the templates for up to ttl, so that resolving a name
// costs no round trip. Once a snapshot is stale, one caller reloads it while
// the others go on with the old one; changes made through this store are seen
// by the next call, others within ttl.
type templateCache struct {
	ttl time.Duration
	cur atomic.Pointer[templateSet]
	gen atomic.Int64 // bumped by invalidate
	// reload holds a token while one caller reloads: a channel, so that a
	// caller waiting on a hung Redis gives up when its context ends.
	reload chan struct{}
}

type templateSet struct {
	loaded time.Time
	gen    int64
	list   []*compiledTemplate
}

func (c *templateCache) invalidate() { c.gen.Add(1) }

func (c *templateCache) match(ctx context.Context, s *Store, name string) (*compiledTemplate, error) {
	set := c.cur.Load()
	if set == nil || set.gen != c.gen.Load() || time.Since(set.loaded) > c.ttl {
		// The first load, or a change made here, must be waited for; a stale
		// snapshot is reloaded by whoever gets there first.
		if set == nil || set.gen != c.gen.Load() {
			select {
			case c.reload <- struct{}{}:
			case <-ctx.Done():
				return nil, wrapErr(ctx.Err())
			}
		} else {
			select {
			case c.reload <- struct{}{}:
			default:
				return set.match(name), nil
			}
		}
		fresh, err := c.load(ctx, s)
		<-c.reload
		if err != nil {
			return nil, err
		}
		set = fresh
	}
	return set.match(name), nil
}

// load reads the templates, unless a concurrent caller just did. Called with
// c.reload held.
func (c *templateCache) load(ctx context.Context, s *Store) (*templateSet, error) {
	gen := c.gen.Load()
	if set := c.cur.Load(); set != nil && set.gen == gen && time.Since(set.loaded) <= c.ttl {
		return set, nil
	}
	ts, err := s.Templates(ctx)
	if err != nil {
		return nil, err
	}
	set := &templateSet{loaded: time.Now(), gen: gen}
	for _, t := range ts {
		p, err := limiter.Compile(t.Limiter)
		if err != nil {
			continue // written by a newer limitd with rules this one lacks
		}
		ct := &compiledTemplate{Template: t, argv: paramArgs(&p, t.Version)}
		words := []string{strconv.FormatInt(t.Version, 10), strconv.FormatInt(ct.idleTTLms(), 10)}
		for _, a := range ct.argv {
			words = append(words, fmt.Sprint(a))
		}
		ct.head = strings.Join(words, " ")
		ct.head1 = "1 " + ct.head
		set.list = append(set.list, ct)
	}
	c.cur.Store(set)
	return set, nil
}

func (set *templateSet) match(name string) *compiledTemplate {
	for _, t := range set.list {
		if ok, _ := path.Match(t.Pattern, name); ok {
			return t
		}
	}
	return nil
}
