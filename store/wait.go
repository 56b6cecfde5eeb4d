package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/lua"
)

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
