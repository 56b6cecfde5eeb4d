package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Holders reads the holders of the share or concurrency limiter name. A
// limiter of a rate kind is ErrConflict.
func (s *Store) Holders(ctx context.Context, name string) (limitd.Holders, error) {
	if err := limitd.CheckName(name); err != nil {
		return limitd.Holders{}, err
	}
	var (
		now   *redis.TimeCmd
		head  *redis.SliceCmd
		share *redis.MapStringStringCmd
		slots *redis.ZSliceCmd
	)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		head = p.HMGet(ctx, s.limiterKey(name), "kind", "sh_until", "ver")
		share = p.HGetAll(ctx, s.clientsKey(name))
		slots = p.ZRangeWithScores(ctx, s.slotsKey(name), 0, -1)
		return nil
	})
	if err != nil {
		return limitd.Holders{}, wrapErr(err)
	}
	h := head.Val()
	if len(h) != 3 {
		return limitd.Holders{}, fmt.Errorf("store: leases of %q: %w", name, badReply("HMGET answered %d values", len(h)))
	}
	if h[0] == nil {
		return limitd.Holders{}, fmt.Errorf("limiter %q: %w", name, ErrNotFound)
	}
	r := &reply{v: h}
	t := now.Val()
	l := limitd.Holders{Kind: limiter.Kind(r.str(0)), Version: r.int(2), Now: t.UnixNano()}
	if err := r.check("holders", name); err != nil {
		return limitd.Holders{}, err
	}
	us := t.UnixMicro()
	switch l.Kind {
	case limiter.KindShare:
		if u, ok := h[1].(string); ok {
			until, err := strconv.ParseInt(u, 10, 64)
			if err != nil {
				return limitd.Holders{}, fmt.Errorf("store: leases of %q: %w", name, badReply("sh_until %q", u))
			}
			l.Learning = us < until
		}
		for id, v := range share.Val() {
			lease, err := parseShareHolder(id, v)
			if err != nil {
				return limitd.Holders{}, fmt.Errorf("store: leases of %q: %w", name, err)
			}
			if lease.Expires > l.Now { // expired at now: Expires <= now (share.lua)
				l.Share = append(l.Share, lease)
				l.Held += lease.Has
			}
		}
		slices.SortFunc(l.Share, func(a, b limitd.ShareHolder) int { return strings.Compare(a.ClientID, b.ClientID) })
	case limiter.KindConcurrency:
		for _, z := range slots.Val() {
			id, _ := z.Member.(string)
			if exp := int64(z.Score); exp > us { // expired at now: score <= now (concurrency.lua)
				l.Slots = append(l.Slots, limitd.SlotHolder{LeaseID: id, Expires: exp * 1000})
			}
		}
	default:
		return limitd.Holders{}, kindConflict(name, l.Kind)
	}
	return l, nil
}

// parseShareHolder reads a client's entry in a share limiter's client hash:
// "wants has weight expires_us" (lua/share.lua).
func parseShareHolder(id, v string) (limitd.ShareHolder, error) {
	f := strings.Fields(v)
	if len(f) != 4 {
		return limitd.ShareHolder{}, badReply("share lease of %q: %q", id, v)
	}
	var n [4]float64
	for i, w := range f {
		x, err := strconv.ParseFloat(w, 64)
		if err != nil {
			return limitd.ShareHolder{}, badReply("share lease of %q: %q", id, v)
		}
		n[i] = x
	}
	return limitd.ShareHolder{ClientID: id, Wants: n[0], Has: n[1], Priority: n[2], Expires: int64(n[3]) * 1000}, nil
}

// InstanceTTL is the time to live left of template instance name's state,
// ns (0: none).
func (s *Store) InstanceTTL(ctx context.Context, name string) (int64, error) {
	if err := limitd.CheckName(name); err != nil {
		return 0, err
	}
	d, err := s.rdb.PTTL(ctx, s.instanceKey(name)).Result()
	if err != nil {
		return 0, wrapErr(err)
	}
	return max(0, int64(d)), nil // no key (-2) or no TTL (-1): 0
}

const instanceScanBudget = 100_000 // keys InstanceCount scans per node

// InstanceCount counts the instance keys whose names match pattern (a name
// an earlier template also matches counts too). Past instanceScanBudget keys
// on a node, the count is extrapolated from the part scanned and exact is
// false.
func (s *Store) InstanceCount(ctx context.Context, pattern string) (n int64, exact bool, err error) {
	match := s.prefix + ":{" + pattern + "}:i"
	exact = true
	var mu sync.Mutex // nodes run concurrently; each adds to the shared totals
	err = s.eachNode(ctx, func(ctx context.Context, c redis.Cmdable) error {
		mu.Lock()
		defer mu.Unlock()
		var cursor uint64
		var seen, found int64
		for {
			keys, next, err := c.Scan(ctx, cursor, match, 1000).Result()
			if err != nil {
				return err
			}
			found += int64(len(keys))
			seen += 1000
			if cursor = next; cursor == 0 {
				n += found
				return nil
			}
			if seen >= instanceScanBudget {
				size, err := c.DBSize(ctx).Result()
				if err != nil {
					return err
				}
				exact = false
				n += int64(float64(found) / float64(seen) * float64(size))
				return nil
			}
		}
	})
	if err != nil {
		return 0, false, wrapErr(err)
	}
	return n, exact, nil
}

// Lost reports which of the named limiters and templates Redis lost: a
// limiter whose config is gone or that the index (List) does not name, a
// template the template table lacks. Every name is checked (a cluster shard
// loses only its own slots), in one pipeline. When some checks fail, the
// names found lost are returned with an error wrapping ErrUnavailable.
func (s *Store) Lost(ctx context.Context, limiters, templates []string) (lostLimiters, lostTemplates []string, err error) {
	if len(limiters) == 0 && len(templates) == 0 {
		return nil, nil, nil
	}
	pipe := s.rdb.Pipeline()
	exists := make([]*redis.IntCmd, len(limiters))
	listed := make([]*redis.FloatCmd, len(limiters))
	for i, name := range limiters {
		exists[i] = pipe.Exists(ctx, s.limiterKey(name))
		listed[i] = pipe.ZScore(ctx, s.indexKey(), name)
	}
	held := make([]*redis.BoolCmd, len(templates))
	for i, id := range templates {
		held[i] = pipe.HExists(ctx, s.templatesKey(), id)
	}
	pipelineErr(pipe.Exec(ctx)) // each command's own error is read below

	var first error
	for i, name := range limiters {
		n, err1 := exists[i].Result()
		_, err2 := listed[i].Result()
		switch {
		case err1 != nil:
			first = cmp.Or(first, err1)
		case n == 0 || errors.Is(err2, redis.Nil):
			lostLimiters = append(lostLimiters, name)
		default:
			first = cmp.Or(first, err2)
		}
	}
	for i, id := range templates {
		ok, err := held[i].Result()
		if first = cmp.Or(first, err); err == nil && !ok {
			lostTemplates = append(lostTemplates, id)
		}
	}
	return lostLimiters, lostTemplates, wrapErr(first)
}

func (s *Store) markerKey() string { return s.prefix + ":boot" }

// Mark writes limitd's marker, sum as its value (the applied
// configuration's hash, for an operator to read).
func (s *Store) Mark(ctx context.Context, sum string) error {
	return wrapErr(s.rdb.Set(ctx, s.markerKey(), sum, 0).Err())
}

// Marked reports whether limitd's marker is there, and Redis' time (Unix
// ns) as it answered, in one round trip.
func (s *Store) Marked(ctx context.Context) (marked bool, now int64, err error) {
	pipe := s.rdb.Pipeline()
	exists := pipe.Exists(ctx, s.markerKey())
	t := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, 0, wrapErr(err)
	}
	return exists.Val() == 1, t.Val().UnixNano(), nil
}

// Wait returns the live state of a limiter (or template instance) without
// changing it.
func (s *Store) Wait(ctx context.Context, name string) (limitd.WaitInfo, error) {
	keys, tpl, err := s.target(ctx, name)
	if err != nil {
		return limitd.WaitInfo{}, err
	}
	peek := func() ([]any, error) {
		v, err := s.run(ctx, lua.Peek, keys, tpl.args()...)
		if err != nil {
			return nil, err
		}
		return v, replyErr("peek", name, v)
	}
	v, err := peek()
	if s.boundsSent(ctx, name, &err) {
		v, err = peek()
	}
	if err != nil {
		return limitd.WaitInfo{}, err
	}
	return s.decodeWait(name, v)
}

// WaitMany is Wait for each of names, in one pipeline: out[i] and errs[i]
// are Wait's for names[i]. A name the pipeline could not answer (the scripts
// not loaded, a calendar window's bounds) is read again by Wait alone.
func (s *Store) WaitMany(ctx context.Context, names []string) (out []limitd.WaitInfo, errs []error) {
	out, errs = make([]limitd.WaitInfo, len(names)), make([]error, len(names))
	cmds := make([]*redis.Cmd, len(names))
	verb, fn := "evalsha", s.scripts[lua.Peek].Hash()
	if f := s.fn.function(lua.Peek); f != "" {
		verb, fn = "fcall", f
	}
	pipelineErr(s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			keys, tpl, err := s.target(ctx, name)
			if err != nil {
				errs[i] = err
				continue
			}
			cmds[i] = onceCmd(ctx, verb, fn, keys, tpl.args())
			_ = p.Process(ctx, once{cmds[i]})
		}
		return nil
	}))
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		x, err := cmd.Result()
		switch v, ok := x.([]any); {
		case isNoScript(err) || fnMissing(err) || fnUnsupported(err):
			out[i], errs[i] = s.Wait(ctx, names[i])
		case err != nil:
			errs[i] = wrapErr(err)
		case !ok:
			errs[i] = fmt.Errorf("store: %s: unexpected reply %v", lua.Peek, x)
		default:
			err := replyErr("peek", names[i], v)
			if _, nb := errors.AsType[*needBounds](err); nb {
				out[i], errs[i] = s.Wait(ctx, names[i])
			} else if err != nil {
				errs[i] = err
			} else {
				out[i], errs[i] = s.decodeWait(names[i], v)
			}
		}
	}
	return out, errs
}

// decodeWait reads peek.lua's reply v for name: {1, wait, delay, version,
// now_us, started, instance, the totals allocated, idle, permits, lateness
// as lo, hi pairs, a started limiter's position relative to now[, limit]}.
func (s *Store) decodeWait(name string, v []any) (limitd.WaitInfo, error) {
	r := &reply{v: v}
	w := limitd.WaitInfo{
		Wait: r.int(1), Delay: r.int(2), Version: r.int(3), Now: r.int(4) * 1000,
		Started: r.flag(5), Instance: r.flag(6),
		Allocated: r.total(7), Idle: r.total(9), Permits: r.total(11), Lateness: r.total(13),
	}
	if w.Started {
		w.Position = w.Now + r.int(15)
	}
	if len(v) > 16 {
		w.Window, w.Limit = true, r.int(16)
	}
	if err := r.check("peek", name); err != nil {
		return limitd.WaitInfo{}, err
	}
	if w.Started {
		s.floors.see(name, w.Now, w.Position)
	}
	return w, nil
}
