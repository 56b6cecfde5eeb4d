package store

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/lua"
)

// Redis Functions. On Redis ≥ 7 the rate limiter's calls run as functions
// of one library (lua.Library) with FCALL, which takes about a third off the
// server time of an acquire; elsewhere (miniredis, Redis < 7, an ACL that
// forbids them) as scripts. Nothing is loaded up front: an FCALL that finds
// no library ("Function not found") loads it on every master (FUNCTION LOAD
// REPLACE: idempotent) and calls again. An unknown command or NOPERM
// switches the store to scripts for good.

var library = sync.OnceValue(lua.Library)

type functions struct {
	lib  lua.Lib
	off  atomic.Bool   // run scripts, not functions
	gen  atomic.Uint64 // library loads so far
	load sync.Mutex    // one load at a time
}

// function returns the name of op's function, or "" when op runs as a script.
func (f *functions) function(op string) string {
	if f.off.Load() {
		return ""
	}
	return f.lib.Functions[op]
}

// fnMissing: the node lacks the library.
func fnMissing(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "ERR Function not found")
}

// fnUnsupported: the server has no functions, or this user may not use them.
func fnUnsupported(err error) bool {
	return err != nil &&
		(strings.HasPrefix(err.Error(), "ERR unknown command") || strings.HasPrefix(err.Error(), "NOPERM"))
}

// fcall runs op's function; ok false: op is to run as a script.
func (s *Store) fcall(ctx context.Context, op string, keys []string, args []any) (v any, ok bool, err error) {
	fn := s.fn.function(op)
	if fn == "" {
		return nil, false, nil
	}
	gen := s.fn.gen.Load()
	v, err = s.callOnce(ctx, "fcall", fn, keys, args)
	if fnMissing(err) { // it ran nothing: call again once the library is loaded
		if err = s.loadFunctions(ctx, gen); err == nil {
			v, err = s.callOnce(ctx, "fcall", fn, keys, args)
		}
	}
	if fnUnsupported(err) {
		s.fn.off.Store(true)
		return nil, false, nil
	}
	return v, true, err
}

// loadFunctions loads the library on every master, unless a load has
// completed since the caller saw gen (a burst of callers loads it once).
func (s *Store) loadFunctions(ctx context.Context, gen uint64) error {
	s.fn.load.Lock()
	defer s.fn.load.Unlock()
	if s.fn.gen.Load() != gen {
		return nil
	}
	err := s.eachNode(ctx, func(ctx context.Context, c redis.Cmdable) error {
		return c.FunctionLoadReplace(ctx, s.fn.lib.Source).Err()
	})
	if err == nil {
		s.fn.gen.Add(1)
	}
	return err
}
