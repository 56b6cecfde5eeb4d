package store

import (
	"context"
	"errors"
	"fmt"
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
	// change through Patch).
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
	for _, name := range []string{lua.Acquire, lua.Grant, lua.Peek, lua.Release, lua.Reset, lua.Configure, lua.Delete} {
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

// limiterKey is a named limiter's hash; instanceKey a template instance's. Both
// carry the name as hash tag, so one script may touch both.
func (s *Store) limiterKey(name string) string  { return s.prefix + ":{" + name + "}:l" }
func (s *Store) instanceKey(name string) string { return s.prefix + ":{" + name + "}:i" }
func (s *Store) indexKey() string               { return s.prefix + ":index" }
func (s *Store) templatesKey() string           { return s.prefix + ":templates" }
func (s *Store) templateVersionKey() string     { return s.prefix + ":templates:version" }

// Channel is the pub/sub channel on which every config change is published as
// "<name> <version>" (version 0: deleted; name "*template*": templates changed).
func (s *Store) Channel() string { return s.prefix + ":changes" }

func (s *Store) run(ctx context.Context, op string, keys []string, args ...any) ([]any, error) {
	v, err := s.scripts[op].Run(ctx, s.rdb, keys, args...).Slice()
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
