package store

import (
	"context"

	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Errors callers branch on, besides limiter.ErrNotFound and limiter.ErrInvalid.
var (
	// ErrUnavailable means Redis did not answer (down, timed out, failing over).
	ErrUnavailable = errors.New("redis unavailable")
	// ErrConflict means the change contradicts the limiter as it is (a kind
	// change through Patch), or the call is not one the limiter's kind takes
	// (Acquire on a share limiter, Capacity on a schedule...).
	ErrConflict = errors.New("conflict")
	// ErrClosed is returned by calls on a store after Close.
	ErrClosed = errors.New("store closed")
	// ErrNotFound and ErrInvalid are limiter's, repeated here for convenience.
	ErrNotFound = limiter.ErrNotFound
	ErrInvalid  = limiter.ErrInvalid
)

// DefaultPrefix is the key prefix when none is configured.
const DefaultPrefix = "limitd"

// Store is the Redis side of limitd. It is safe for concurrent use.
type Store struct {
	rdb       redis.UniversalClient
	prefix    string
	scripts   map[string]*redis.Script
	fn        functions // the rate limiter's calls as Redis Functions (functions.go)
	templates templateCache
	batcher   *batcher
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the key prefix (default "limitd"), so several limitd
// deployments can share one Redis.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// New returns a store over rdb. Call Close when done if WithBatching was used.
func New(rdb redis.UniversalClient, opts ...Option) *Store {
	s := &Store{rdb: rdb, prefix: DefaultPrefix, scripts: map[string]*redis.Script{}}
	s.fn.lib = library()
	for _, name := range lua.Ops {
		s.scripts[name] = redis.NewScript(lua.Source(name))
	}
	s.templates.ttl = time.Second
	for _, o := range opts {
		o(s)
	}
	return s
}

// Close stops the store's background work (the batcher). It does not close
// the Redis client, which the caller owns.
func (s *Store) Close() error {
	if s.batcher != nil {
		s.batcher.stop()
	}
	return nil
}

// Client returns the Redis client the store uses.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

// limiterKey is a named limiter's hash (kind, version, config), stateKey its
// packed state (x in lua/lib.lua), instanceKey a template instance's. All
// carry the name as hash tag, so one script may touch them all.
func (s *Store) limiterKey(name string) string  { return s.prefix + ":{" + name + "}:l" }
func (s *Store) stateKey(name string) string    { return s.prefix + ":{" + name + "}:x" }
func (s *Store) instanceKey(name string) string { return s.prefix + ":{" + name + "}:i" }
func (s *Store) indexKey() string               { return s.prefix + ":index" }
func (s *Store) templatesKey() string           { return s.prefix + ":templates" }
func (s *Store) templateVersionKey() string     { return s.prefix + ":templates:version" }

// clientsKey is a share limiter's leases by client, slotsKey a concurrency
// limiter's leased slots; both beside the limiter's hash, in its slot.
func (s *Store) clientsKey(name string) string { return s.prefix + ":{" + name + "}:c" }
func (s *Store) slotsKey(name string) string   { return s.prefix + ":{" + name + "}:s" }

// limiterKeys are every key a named limiter may have, its hash first, its
// state key second.
func (s *Store) limiterKeys(name string) []string {
	return []string{s.limiterKey(name), s.stateKey(name), s.clientsKey(name), s.slotsKey(name)}
}

// Channel is the pub/sub channel on which every config change is published as
// "<name> <version>" (version 0: deleted; name "*template*": templates changed).
func (s *Store) Channel() string { return s.prefix + ":changes" }

// run runs op: as a Redis Function where it is one and Redis has them (see
// functions.go), else as a script.
func (s *Store) run(ctx context.Context, op string, keys []string, args ...any) ([]any, error) {
	v, err := s.runAny(ctx, op, keys, args...)
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("store: %s: unexpected reply %v", op, v)
	}
	return a, nil
}

// runAny is run for a reply of any type.
func (s *Store) runAny(ctx context.Context, op string, keys []string, args ...any) (any, error) {
	v, ok, err := s.fcall(ctx, op, keys, args)
	if !ok {
		v, err = s.scripts[op].Run(ctx, s.rdb, keys, args...).Result()
	}
	if err != nil {
		return nil, wrapErr(err)
	}
	return v, nil
}

// wrapErr turns transport failures into ErrUnavailable, keeping the cause.
func wrapErr(err error) error {
	if err == nil {
		return nil
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !errors.Is(err, redis.Nil) {
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "MOVED", "ASK"} {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
		}
		return fmt.Errorf("store: redis: %w", err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// Ping reports whether Redis answers.
func (s *Store) Ping(ctx context.Context) error { return wrapErr(s.rdb.Ping(ctx).Err()) }

// paramArgs encodes engine parameters in the order of PARAMS in lua/lib.lua.
func paramArgs(p *limiter.Params, version int64) []any {
	burst := p.Burst
	if burst > limiter.MaxBurst { // "inf" travels as 0
		burst = 0
	}
	warm := 0
	if p.Warm {
		warm = 1
	}
	return []any{string(p.Kind), p.Slice.Whole, p.Slice.Frac, p.Slice.Den, p.MaxPermits, ff(burst),
		p.MaxBacklog, p.Cap, p.Initial, warm, ff(p.Stable), ff(p.Cooldown), ff(p.Threshold), ff(p.Slope), version}
}

func ff(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// stored is a rate limiter's hash as lua/lib.lua keeps it ("Storage" there),
// decoded: for tests and for looking into Redis by hand.
type stored struct {
	Kind    limiter.Kind
	Version int64
	// Params as the scripts see them: Burst 0 for "inf" (and for smooth),
	// Stable computed from the slice (it is not stored).
	Params        limiter.Params
	Started       bool
	Epoch, Origin int64 // Unix µs
	// Next, Pace and Stored are ns relative to Epoch; Rem is in 1/Den ns.
	Next, Pace, Rem, Stored            int64
	Allocated, Idle, Permits, Lateness int64
}

// decodeStored decodes x, everything lib.lua keeps of a rate limiter in one
// packed value ("Storage" there): a named limiter's hash field x, or a
// template instance's string key. ok is false when x is nil (no such
// limiter); a share or concurrency limiter's x is its kind alone. Both forms
// are read: binary (struct.pack) and text (numbers one space apart, where Lua
// lacks struct).
func decodeStored(x any) (st stored, ok bool, err error) {
	if x == nil {
		return stored{}, false, nil
	}
	u := newUnpacker(toString(x))
	switch code := u.uint(1); code {
	case 1:
		st.Kind = limiter.KindSchedule
	case 2:
		st.Kind = limiter.KindSmooth
	default:
		// A share or concurrency limiter (configure_lease.lua).
		return stored{Kind: limiter.Kind(toString(x))}, true, nil
	}
	st.Version = u.int(7)
	p := &st.Params
	p.Kind = st.Kind
	p.Slice = limiter.Slice{Whole: u.int(7), Frac: u.uint(4), Den: u.uint(4)}
	p.MaxPermits = u.int(7)
	if st.Kind == limiter.KindSchedule { // burst maxb: 'di7'
		p.Burst, p.MaxBacklog = u.float(), u.int(7)
	} else { // cap init warm cool thr slope: 'i7i7Bddd'
		p.Cap, p.Initial, p.Warm = u.int(7), u.int(7), u.uint(1) == 1
		p.Cooldown, p.Threshold, p.Slope = u.float(), u.float(), u.float()
	}
	// state and totals (X_STATE): st ep 'Bi7', nx pc rem 'i7i7i4', the
	// totals' low parts 'i7' x4, org sto 'i7i7', their high parts 'i4' x4
	st.Started = u.uint(1) == 1
	st.Epoch = u.int(7)
	st.Next, st.Pace, st.Rem = u.int(7), u.int(7), u.int(4)
	totals := []*int64{&st.Allocated, &st.Idle, &st.Permits, &st.Lateness}
	var lo [4]int64
	for i := range totals {
		lo[i] = u.int(7)
	}
	st.Origin, st.Stored = u.int(7), u.int(7)
	for i, t := range totals {
		*t = u.int(4)<<32 + lo[i]
	}
	if err := u.done("x"); err != nil {
		return st, true, err
	}
	if p.Slice.Den > 0 {
		p.Stable = float64(p.Slice.Whole) + float64(p.Slice.Frac)/float64(p.Slice.Den)
	}
	return st, true, nil
}

// unpacker reads the numbers of one packed field in order.
type unpacker struct {
	b      string   // binary form
	words  []string // text form
	isText bool
	err    error
}

func newUnpacker(s string) *unpacker {
	if isPackedText(s) {
		return &unpacker{words: strings.Fields(s), isText: true}
	}
	return &unpacker{b: s}
}

// next returns the next n bytes (binary) or the next word (text).
func (u *unpacker) next(n int) string {
	if u.err != nil {
		return ""
	}
	if u.isText {
		if len(u.words) == 0 {
			u.err = errors.New("too few numbers")
			return ""
		}
		w := u.words[0]
		u.words = u.words[1:]
		return w
	}
	if len(u.b) < n {
		u.err = fmt.Errorf("too short by %d bytes", n-len(u.b))
		return ""
	}
	b := u.b[:n]
	u.b = u.b[n:]
	return b
}

// str is a name: a length byte and its bytes (text: a word).
func (u *unpacker) str() string {
	if u.isText {
		return u.next(0)
	}
	return u.next(int(u.uint(1)))
}

// uint is an unsigned little-endian integer of n bytes ('B', 'I4').
func (u *unpacker) uint(n int) int64 {
	b := u.next(n)
	if u.isText {
		return u.textInt(b, 0, 1<<(8*n))
	}
	var x uint64
	for i := len(b) - 1; i >= 0; i-- {
		x = x<<8 | uint64(b[i])
	}
	return int64(x)
}

// int is a signed (two's complement) little-endian integer of n bytes ('i4',
// 'i7').
func (u *unpacker) int(n int) int64 {
	if u.isText {
		return u.textInt(u.next(n), -1<<(8*n-1), 1<<(8*n-1))
	}
	x := u.uint(n)
	if x>>(8*n-1)&1 == 1 {
		x -= 1 << (8 * n)
	}
	return x
}

// float is a little-endian double ('d').
func (u *unpacker) float() float64 {
	b := u.next(8)
	if u.isText {
		f, err := strconv.ParseFloat(b, 64)
		if err != nil && u.err == nil {
			u.err = err
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

// textInt reads an integer the text form wrote with '%.17g', which must lie
// in [lo, hi): the text form holds any number, so this is where a value the
// binary form could not hold (a fraction, or too large for its bytes) shows.
func (u *unpacker) textInt(w string, lo, hi int64) int64 {
	if u.err != nil {
		return 0
	}
	x, err := strconv.ParseInt(w, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(w, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<62 {
			u.err = fmt.Errorf("%q is not an integer", w)
			return 0
		}
		x = int64(f)
	}
	if x < lo || x >= hi {
		u.err = fmt.Errorf("%d is out of [%d, %d)", x, lo, hi)
		return 0
	}
	return x
}

// done reports a field that was short, unreadable or too long.
func (u *unpacker) done(name string) error {
	if u.err == nil && (len(u.b) > 0 || len(u.words) > 0) {
		u.err = errors.New("too long")
	}
	if u.err != nil {
		return fmt.Errorf("store: packed field %s: %w", name, u.err)
	}
	return nil
}

// isPackedText tells the text form from the binary one by the first byte: a
// number's digit in text, a code in binary (x starts with 1 or 2, an answer
// of acquire.lua with 1, 3 or 4); a share or concurrency limiter's x, its
// kind's name, is neither.
func isPackedText(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }
