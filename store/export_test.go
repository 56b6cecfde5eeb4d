package store

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// RaceDetector is whether the tests run under the race detector.
const RaceDetector = raceDetector

// Stored is a rate limiter's x as lua/lib.lua keeps it, decoded (stored).
type Stored = stored

// ReadStored reads and decodes the x at key (a named limiter's state key or
// an instance's key); ok is false when it does not exist.
func ReadStored(ctx context.Context, s *Store, key string) (st Stored, ok bool, err error) {
	x, err := s.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return Stored{}, false, nil
	}
	if err != nil {
		return Stored{}, false, err
	}
	return decodeStored(x)
}

// DecodeStored decodes a packed x (decodeStored).
var DecodeStored = decodeStored

// WithLocalClock sets the local monotonic clock (ns) the store estimates
// Redis' clock from, for fixed windows.
func WithLocalClock(now func() int64) Option { return func(s *Store) { s.fixed.now = now } }

// WithScriptsOnly runs every operation as a script, even where Redis has
// functions (tests and benchmarks compare the two).
func WithScriptsOnly() Option { return func(s *Store) { s.fn.off.Store(true) } }

var withScriptsOnly = WithScriptsOnly

// WithFloorCap sets how many names' floors the store keeps (0: none, which
// turns floors off).
func WithFloorCap(n int) Option { return func(s *Store) { s.floors.setCap(n) } }

var withFloorCap = WithFloorCap

func (f *floorSet) len() int {
	n := 0
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// float is a little-endian double ('d').
func (u *unpacker) float() float64 {
	b := u.next(8)
	if u.isText {
		f, err := strconv.ParseFloat(b, 64)
		if err != nil && u.err == nil {
			u.err = badReply("%v", err)
		}
		return f
	}
	if len(b) < 8 {
		return 0
	}
	var x uint64
	for i := 7; i >= 0; i-- {
		x = x<<8 | uint64(b[i])
	}
	return math.Float64frombits(x)
}

// FloorOf is the floor the store would send with its next call on name.
func FloorOf(s *Store, name string) (limiter.Floor, bool) { return s.floors.get(name) }

// FloorCount is how many names' floors the store keeps.
func FloorCount(s *Store) int { return s.floors.len() }

// FloorCountOf is FloorCount for tests inside the package.
func FloorCountOf(s *Store) int { return s.floors.len() }

// withSpread sets spreadHooks: AcquireAll on one server decides as on a
// cluster, with afterCheck between the dry run and the takes.
func withSpread(afterCheck func()) Option {
	return func(s *Store) { s.spread = &spreadHooks{afterCheck: afterCheck} }
}

// FixedScripted is how many times fixed windows were counted by the script.
func FixedScripted(s *Store) int64 { return s.fixed.scripted.Load() }

// FixedKey is the key of name's fixed window starting at start (Unix ns).
func FixedKey(s *Store, name string, start int64) string { return s.fixedKey(name, start) }

// TrustFixedEstimate sets how long a round trip and how old a sample the
// estimate of Redis' clock is trusted from (a Redis under valgrind).
func TrustFixedEstimate(s *Store, rtt, age time.Duration) {
	s.fixed.maxRTT, s.fixed.maxAge = int64(rtt), int64(age)
}

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Ping reports whether Redis answers.
func (s *Store) Ping(ctx context.Context) error { return wrapErr(s.rdb.Ping(ctx).Err()) }

// Failed is how many flushes Redis did not take.
func (t *Tally) Failed() int64 { return t.failed.Load() }

// LuaLib is lua/lib.lua with the kind files and what is derived from them:
// the function library's source (lua.Library) between its "#!lua" line and
// its first function, which is where the library keeps it. Tests call its
// functions on their own.
func LuaLib(t testing.TB) string {
	t.Helper()
	_, src, _ := strings.Cut(lua.Library().Source, "\n")
	lib, _, ok := strings.Cut(src, "\nredis.register_function(")
	if !ok {
		t.Fatal("lua.Library's source registers no function")
	}
	return lib + "\n"
}
