package store

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Errors callers branch on: limiter's, repeated here for convenience, and
// ErrClosed.
var (
	// ErrUnavailable means Redis did not answer (down, timed out, failing over).
	ErrUnavailable = limiter.ErrUnavailable
	// ErrConflict means the change contradicts the limiter as it is (a kind
	// change through Patch), or its kind does not take the call.
	ErrConflict = limiter.ErrConflict
	ErrNotFound = limiter.ErrNotFound
	ErrInvalid  = limiter.ErrInvalid
	// ErrClosed is returned by calls on a store after Close; it matches
	// ErrUnavailable too.
	ErrClosed = fmt.Errorf("store closed: %w", ErrUnavailable)
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
	batchMax  int          // WithBatching's, 0 without
	batcher   *batcher     // started by New when batchMax > 0, stopped by Close
	floors    floorSet     // the furthest schedule position seen per name (floors.go)
	spread    *spreadHooks // tests: AcquireAll as on a cluster (acquire_all.go)
	fixed     fixedClock   // Redis' clock as estimated, for fixed windows (fixed.go)
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
	for _, name := range lua.Ops() {
		s.scripts[name] = redis.NewScript(lua.Source(name))
	}
	s.templates.ttl = time.Second
	s.templates.reload = make(chan struct{}, 1)
	s.floors.seed = maphash.MakeSeed()
	s.floors.setCap(DefaultFloorCap)
	for _, o := range opts {
		o(s)
	}
	s.fixed.init()
	s.batcher = newBatcher(s)
	return s
}

// Close stops the store's background work (the batcher, and the expiries
// of new fixed window counts, which it sends then), not the Redis client.
func (s *Store) Close() error {
	if s.batcher != nil {
		s.batcher.stop()
	}
	s.fixed.close(s)
	return nil
}

// Client returns the Redis client the store uses.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// limiterKey is a named limiter's hash (kind, version, config), stateKey its
// packed state (x in lua/lib.lua), instanceKey a template instance's;
// clientsKey a share limiter's leases by client, slotsKey a concurrency
// limiter's leased slots. All carry the name as hash tag.
func (s *Store) limiterKey(name string) string  { return s.prefix + ":{" + name + "}:l" }
func (s *Store) stateKey(name string) string    { return s.prefix + ":{" + name + "}:x" }
func (s *Store) instanceKey(name string) string { return s.prefix + ":{" + name + "}:i" }
func (s *Store) indexKey() string               { return s.prefix + ":index" }
func (s *Store) templatesKey() string           { return s.prefix + ":templates" }
func (s *Store) templateVersionKey() string     { return s.prefix + ":templates:versions" }
func (s *Store) clientsKey(name string) string  { return s.prefix + ":{" + name + "}:c" }
func (s *Store) slotsKey(name string) string    { return s.prefix + ":{" + name + "}:s" }

// limiterKeys are every key a named limiter may have, its hash first, its
// state key second, its totals last (a limiter deleted or replaced by one of
// another kind starts its totals over).
func (s *Store) limiterKeys(name string) []string {
	return []string{s.limiterKey(name), s.stateKey(name), s.clientsKey(name), s.slotsKey(name), s.totalsKey(name)}
}

// Channel is the pub/sub channel on which every config change is published as
// "<name> <version>" (version 0: deleted; name "*template*": templates changed).
func (s *Store) Channel() string { return s.prefix + ":changes" }

// eachNode runs f on every master of a cluster, every shard of a ring, or
// the one server.
func (s *Store) eachNode(ctx context.Context, f func(context.Context, redis.Cmdable) error) error {
	node := func(ctx context.Context, c *redis.Client) error { return f(ctx, c) }
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, node)
	case *redis.Ring:
		return c.ForEachShard(ctx, node)
	}
	return f(ctx, s.rdb)
}

// run runs op: as a Redis Function where it is one and Redis has them, else
// as a script.
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

func (s *Store) runAny(ctx context.Context, op string, keys []string, args ...any) (any, error) {
	v, ok, err := s.fcall(ctx, op, keys, args)
	if !ok {
		script := s.scripts[op]
		v, err = s.callOnce(ctx, "evalsha", script.Hash(), keys, args)
		if isNoScript(err) { // it ran nothing: send the script itself
			v, err = s.callOnce(ctx, "eval", lua.Source(op), keys, args)
		}
	}
	if err != nil {
		return nil, wrapErr(err)
	}
	return v, nil
}

// once is a command go-redis sends at most once, whatever its retry
// settings: a call whose reply did not come in time may have run, and sent
// again it would take its permits (or count its hits) twice. A pipeline that
// holds one is not sent again either. (A redirect, MOVED, ASK or READONLY,
// still goes to the node that serves the key: Redis ran nothing then.) The
// cost is that a call on a connection that broke before it was written
// fails; go-redis checks a pooled connection before using it.
type once struct{ redis.Cmder }

func (once) NoRetry() bool { return true }

// callOnce sends verb (fcall, evalsha or eval) of fn, at most once.
func (s *Store) callOnce(ctx context.Context, verb, fn string, keys []string, args []any) (any, error) {
	cmd := onceCmd(ctx, verb, fn, keys, args)
	_ = s.rdb.Process(ctx, once{cmd})
	return cmd.Result()
}

func onceCmd(ctx context.Context, verb, fn string, keys []string, args []any) *redis.Cmd {
	argv := make([]any, 0, 3+len(keys)+len(args))
	argv = append(argv, verb, fn, len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	cmd := redis.NewCmd(ctx, append(argv, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// wrapErr turns every failure that means "Redis cannot serve now" (a
// transport failure, or a refusal such as READONLY) into an
// *UnavailableError naming the condition. Any other Redis error is limitd's
// fault, not the operator's, and kept as it is.
func wrapErr(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*UnavailableError](err); ok {
		return err
	}
	if rerr, ok := errors.AsType[redis.Error](err); ok && !errors.Is(err, redis.Nil) {
		if c := redisCondition(rerr); c != "" {
			return &UnavailableError{Condition: c, err: err}
		}
		return fmt.Errorf("store: redis: %w", err)
	}
	return &UnavailableError{Condition: transportCondition(err), err: err}
}

// pipelineErr sets err, a pipeline's error, on each of its commands cmds
// when none of them holds an error: go-redis returns a failure to open the
// pipeline's connection (a refused AUTH) from the pipeline alone, and its
// commands would read as answered with nothing.
func pipelineErr(cmds []redis.Cmder, err error) {
	if err == nil || slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() != nil }) {
		return
	}
	for _, c := range cmds {
		c.SetErr(err)
	}
}

// paramArgs encodes engine parameters as the scripts take them (see Layouts
// in lua/lib.lua): the kind, the slice, max_permits, the kind's own
// parameters and the version.
func paramArgs(p *limiter.Params, version int64) []any {
	k, _ := limiter.Lookup(p.Kind)
	args := make([]any, 0, 6+len(k.Params))
	args = append(args, string(p.Kind), p.Slice.Whole, p.Slice.Frac, p.Slice.Den, p.MaxPermits)
	for _, q := range k.Params {
		args = append(args, paramArg(q.Value(p)))
	}
	return append(args, version)
}

// paramArg is a parameter's value as the scripts read it: an integer in
// decimal, else a float in the shortest form that reads back exactly.
func paramArg(v float64) any {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return int64(v)
	}
	return ff(v)
}

func ff(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// unpacker reads the numbers of one packed field in order, in its binary or
// text form.
type unpacker struct {
	b      string   // binary form
	words  []string // text form
	isText bool
	err    error
}

func newUnpacker(s string) unpacker {
	if isPackedText(s) {
		return unpacker{words: strings.Fields(s), isText: true}
	}
	return unpacker{b: s}
}

func (u *unpacker) next(n int) string {
	if u.err != nil {
		return ""
	}
	if u.isText {
		if len(u.words) == 0 {
			u.err = badReply("too few numbers")
			return ""
		}
		w := u.words[0]
		u.words = u.words[1:]
		return w
	}
	if len(u.b) < n {
		u.err = badReply("too short by %d bytes", n-len(u.b))
		return ""
	}
	b := u.b[:n]
	u.b = u.b[n:]
	return b
}

// str is a name: a length byte and its bytes.
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

// int is a signed (two's complement) little-endian integer of n bytes.
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

// textInt reads an integer the text form wrote with '%.17g', which must lie
// in [lo, hi), as the binary form's bytes would hold it.
func (u *unpacker) textInt(w string, lo, hi int64) int64 {
	if u.err != nil {
		return 0
	}
	x, err := strconv.ParseInt(w, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(w, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<62 {
			u.err = badReply("%q is not an integer", w)
			return 0
		}
		x = int64(f)
	}
	if x < lo || x >= hi {
		u.err = badReply("%d is out of [%d, %d)", x, lo, hi)
		return 0
	}
	return x
}

func (u *unpacker) done(name string) error {
	if u.err == nil && (len(u.b) > 0 || len(u.words) > 0) {
		u.err = badReply("too long")
	}
	if u.err != nil {
		return fmt.Errorf("store: packed field %s: %w", name, u.err)
	}
	return nil
}

// isPackedText tells the text form from the binary one by the first byte: a
// digit in text, a code in binary (a lease limiter's x, its kind's name, is
// neither).
func isPackedText(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }
