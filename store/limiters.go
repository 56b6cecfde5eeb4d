package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// CheckName reports whether name is a valid limiter name:
// ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$. It is on every call's path, so it is a
// byte loop rather than a regexp.
func CheckName(name string) error {
	ok := len(name) >= 1 && len(name) <= 128 && isAlnum(name[0])
	for i := 1; ok && i < len(name); i++ {
		c := name[i]
		ok = isAlnum(c) || c == '.' || c == '_' || c == ':' || c == '-'
	}
	if !ok {
		return &limiter.FieldError{Field: "name", Rule: "must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", Value: fmt.Sprintf("%q", name)}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// Info is a limiter as stored: its canonical config and version.
type Info struct {
	Name    string
	Config  limiter.Config
	Version int64
	// Template is the id of the template a template instance follows; empty
	// for a named limiter.
	Template string
}

// Put creates or replaces a limiter. A config equal to the current one changes
// nothing; one of the same kind reconfigures the limiter in place keeping its
// schedule; one of another kind replaces it with a fresh one. A spec with the
// verb restart also resets the schedule. created is true for a new limiter.
func (s *Store) Put(ctx context.Context, name string, c limiter.Config) (info Info, created bool, err error) {
	return s.configure(ctx, "put", "", name, c)
}

// Patch reconfigures an existing limiter with the config apply returns from
// the current one, keeping state; the version must not move in between (it is
// retried if it does). A kind change is ErrConflict.
func (s *Store) Patch(ctx context.Context, name string, apply func(limiter.Config) (limiter.Config, error)) (Info, error) {
	for range 8 {
		cur, err := s.Get(ctx, name)
		if err != nil {
			return Info{}, err
		}
		next, err := apply(cur.Config)
		if err != nil {
			return Info{}, err
		}
		info, _, err := s.configure(ctx, "patch", fmt.Sprint(cur.Version), name, next)
		if errors.Is(err, errVersionMoved) {
			continue
		}
		return info, err
	}
	return Info{}, fmt.Errorf("%w: %s changed too often while being patched", ErrConflict, name)
}

var errVersionMoved = errors.New("version moved")

func (s *Store) configure(ctx context.Context, mode, expected, name string, c limiter.Config) (Info, bool, error) {
	if err := CheckName(name); err != nil {
		return Info{}, false, err
	}
	norm, verb, err := c.Normalize()
	if err != nil {
		return Info{}, false, err
	}
	cfg, err := json.Marshal(norm)
	if err != nil {
		return Info{}, false, fmt.Errorf("store: encoding config: %w", err)
	}
	op, args := lua.Configure, []any(nil)
	switch norm.Kind {
	case limiter.KindShare, limiter.KindConcurrency:
		fields, err := leaseFields(norm)
		if err != nil {
			return Info{}, false, err
		}
		op = lua.ConfigureLease
		args = append([]any{mode, expected, string(cfg), s.Channel(), name, string(norm.Kind)}, fields...)
	default:
		p, err := limiter.Compile(norm)
		if err != nil {
			return Info{}, false, err
		}
		restart := "0"
		if verb == limiter.VerbRestart {
			restart = "1"
		}
		args = append([]any{mode, expected, string(cfg), restart, s.Channel(), name}, paramArgs(&p, 0)...)
	}
	// The index may name a limiter that a failed script then did not create;
	// List skips such names. The reverse (a limiter missing from the index)
	// cannot happen.
	if mode == "put" {
		if err := s.rdb.ZAdd(ctx, s.indexKey(), redis.Z{Member: name}).Err(); err != nil {
			return Info{}, false, wrapErr(err)
		}
	}
	v, err := s.run(ctx, op, s.limiterKeys(name), args...)
	if err != nil {
		return Info{}, false, err
	}
	switch code := toInt(v[0]); code {
	case 200, 201:
		return Info{Name: name, Config: norm, Version: toInt(v[1])}, code == 201, nil
	case -1:
		return Info{}, false, fmt.Errorf("limiter %q: %w", name, ErrNotFound)
	case -3:
		return Info{}, false, errVersionMoved
	case -4:
		return Info{}, false, fmt.Errorf("%w: limiter %q is of another kind; PUT replaces a limiter with one of another kind", ErrConflict, name)
	default:
		return Info{}, false, fmt.Errorf("store: configure: unexpected reply %v", v)
	}
}

// Get returns a limiter's config and version, or ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (Info, error) {
	if err := CheckName(name); err != nil {
		return Info{}, err
	}
	v, err := s.rdb.HMGet(ctx, s.limiterKey(name), "cfg", "ver").Result()
	if err != nil {
		return Info{}, wrapErr(err)
	}
	return decodeInfo(name, v)
}

func decodeInfo(name string, v []any) (Info, error) {
	if v[0] == nil {
		return Info{}, fmt.Errorf("limiter %q: %w", name, ErrNotFound)
	}
	var c limiter.Config
	if err := json.Unmarshal([]byte(toString(v[0])), &c); err != nil {
		return Info{}, fmt.Errorf("store: limiter %q has an unreadable config: %w", name, err)
	}
	return Info{Name: name, Config: c, Version: toInt(v[1])}, nil
}

// Delete removes a limiter and all its keys, or returns ErrNotFound.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	v, err := s.scripts[lua.Delete].Run(ctx, s.rdb, s.limiterKeys(name), s.Channel(), name).Int64()
	if err != nil {
		return wrapErr(err)
	}
	if err := s.rdb.ZRem(ctx, s.indexKey(), name).Err(); err != nil {
		return wrapErr(err)
	}
	if v == 0 {
		return fmt.Errorf("limiter %q: %w", name, ErrNotFound)
	}
	return nil
}

// MaxListLimit is the most limiters one List call returns.
const MaxListLimit = 1000

// List returns up to limit limiters whose names sort after cursor, in name
// order, and the cursor of the next page ("" when there is none).
func (s *Store) List(ctx context.Context, cursor string, limit int) ([]Info, string, error) {
	if limit <= 0 || limit > MaxListLimit {
		return nil, "", &limiter.FieldError{Field: "limit", Rule: "must be ≥ 1 and ≤ 1000", Value: limit}
	}
	min := "-"
	if cursor != "" {
		min = "(" + cursor
	}
	// One name more than asked tells whether another page follows, so that
	// the last page ends with an empty cursor even when it is full.
	names, err := s.rdb.ZRangeByLex(ctx, s.indexKey(), &redis.ZRangeBy{Min: min, Max: "+", Count: int64(limit) + 1}).Result()
	if err != nil {
		return nil, "", wrapErr(err)
	}
	next := ""
	if len(names) > limit {
		names = names[:limit]
		next = names[limit-1]
	}
	cmds := make([]*redis.SliceCmd, len(names))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.HMGet(ctx, s.limiterKey(n), "cfg", "ver")
		}
		return nil
	})
	if err != nil {
		return nil, "", wrapErr(err)
	}
	out := make([]Info, 0, len(names))
	for i, n := range names {
		info, err := decodeInfo(n, cmds[i].Val())
		if errors.Is(err, ErrNotFound) {
			s.rdb.ZRem(ctx, s.indexKey(), n) // a stale index entry
			continue
		}
		if err != nil {
			return nil, "", err
		}
		out = append(out, info)
	}
	return out, next, nil
}
