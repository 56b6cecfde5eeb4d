package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Calendar windows get their bounds from the store, computed in Go, when a
// call finds its window ended (docs/kinds.md, "Calendar windows").

// needBounds is a call on a calendar window that decided nothing: the
// window's bounds around now are needed first.
type needBounds struct{ now int64 }

func (e *needBounds) Error() string {
	return fmt.Sprintf("store: a calendar window needs its bounds around %d", e.now)
}

// boundsSent reports whether *err asks for a calendar window's bounds and
// the store sent them, so that the call may be made again; a failure to
// send them replaces *err.
func (s *Store) boundsSent(ctx context.Context, name string, err *error) bool {
	nb, ok := errors.AsType[*needBounds](*err)
	if !ok {
		return false
	}
	if e := s.sendBounds(ctx, name, nb.now); e != nil {
		*err = e
		return false
	}
	return true
}

// sendBounds sends the calendar windows of name's limiter (or template
// instance) around now and after it: twice at most, for a boundary that
// passes in between.
func (s *Store) sendBounds(ctx context.Context, name string, now int64) error {
	for range 2 {
		keys, tpl, err := s.target(ctx, name)
		if err != nil {
			return err
		}
		var cfg limiter.Config
		if tpl != nil {
			cfg = tpl.Limiter
		} else {
			info, err := s.Get(ctx, name)
			if err != nil {
				return err
			}
			cfg = info.Config
		}
		p, err := limiter.Compile(cfg)
		if err != nil || p.Calendar == 0 {
			return err // reconfigured since: the call again will tell
		}
		start, end, after, err := limiter.CalendarBounds(p.Calendar, p.Zone, now)
		if err != nil {
			return err
		}
		args := append([]any{start / 1000, end / 1000, after / 1000, tpl.idleTTLms(), s.floors.floorArg(name)}, tpl.args()...)
		v, err := s.run(ctx, lua.Bounds, keys, args...)
		if err != nil {
			return err
		}
		err = replyErr("bounds", name, v)
		nb, ok := errors.AsType[*needBounds](err)
		if !ok {
			return err
		}
		now = nb.now
	}
	return ErrBoundsUnsettled
}

// ErrBoundsUnsettled is a calendar window whose bounds did not hold twice in
// a row: the Redis clock moved past a boundary each time.
var ErrBoundsUnsettled = errors.New("store: a calendar window's bounds did not settle")
