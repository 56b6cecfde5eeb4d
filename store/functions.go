package store

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/lua"
)

// Redis Functions. On Redis ≥ 7 the rate limiter's calls (lua.Library) run
// as functions of one library (lua.Library) with FCALL. A script runs
// lib.lua's whole top level on every call; a function only its operation,
// which takes about a third off the server time of an acquire. Where Redis has
// no functions (miniredis, Redis < 7, an ACL that forbids them) the same code
// runs as scripts (EVALSHA), as every other operation always does.
//
// Nothing is loaded up front. The first FCALL on a node without the library
// fails with "Function not found" (a new server, FUNCTION FLUSH, a restart
// without persistence, a node new to the cluster); the store then loads the
// library on every master (FUNCTION LOAD REPLACE: idempotent, the name is a
// hash of the code) and calls again. An unknown command or NOPERM switches the
// store to scripts for good.

// library is the function library, built once.
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

// fnMissing: the node lacks the library. fnUnsupported: the server has no
// functions, or this user may not use them.
func fnMissing(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "ERR Function not found")
}

func fnUnsupported(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "ERR unknown command") || strings.HasPrefix(msg, "NOPERM")
}

// fcall runs op's function. ok is false when op is to run as a script instead
// (no function for it, or the server has none).
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
// completed since the caller saw gen (the callers of a burst that all found
// the library missing load it once).
func (s *Store) loadFunctions(ctx context.Context, gen uint64) error {
	s.fn.load.Lock()
	defer s.fn.load.Unlock()
	if s.fn.gen.Load() != gen {
		return nil
	}
	src := s.fn.lib.Source
	load := func(ctx context.Context, c *redis.Client) error { return c.FunctionLoadReplace(ctx, src).Err() }
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, load)
	case *redis.Ring:
		err = c.ForEachShard(ctx, load)
	default:
		err = s.rdb.FunctionLoadReplace(ctx, src).Err()
	}
	if err == nil {
		s.fn.gen.Add(1)
	}
	return err
}
