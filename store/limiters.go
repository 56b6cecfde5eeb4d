package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Put creates or replaces a limiter. A config equal to the current one changes
// nothing; one of the same kind reconfigures the limiter in place keeping its
// schedule (unless its verb is restart); one of another kind replaces it.
func (s *Store) Put(ctx context.Context, name string, c limiter.Config) (info limitd.Info, created bool, err error) {
	return s.configure(ctx, "put", "", name, c)
}

// Patch reconfigures an existing limiter with the config apply returns from
// the current one, keeping state; the version must not move in between (it is
// retried if it does). A kind change is ErrConflict.
func (s *Store) Patch(ctx context.Context, name string, apply func(limiter.Config) (limiter.Config, error)) (limitd.Info, error) {
	for range 8 {
		cur, err := s.Get(ctx, name)
		if err != nil {
			return limitd.Info{}, err
		}
		next, err := apply(cur.Config)
		if err != nil {
			return limitd.Info{}, err
		}
		info, _, err := s.configure(ctx, "patch", fmt.Sprint(cur.Version), name, next)
		if errors.Is(err, errVersionMoved) {
			continue
		}
		return info, err
	}
	return limitd.Info{}, fmt.Errorf("%w: %s changed too often while being patched", ErrConflict, name)
}

var errVersionMoved = errors.New("version moved")

func (s *Store) configure(ctx context.Context, mode, expected, name string, c limiter.Config) (limitd.Info, bool, error) {
	if err := limitd.CheckName(name); err != nil {
		return limitd.Info{}, false, err
	}
	norm, verb, err := c.Normalize()
	if err != nil {
		return limitd.Info{}, false, err
	}
	cfg, err := json.Marshal(norm)
	if err != nil {
		return limitd.Info{}, false, fmt.Errorf("store: encoding config: %w", err)
	}
	op, args := lua.Configure, []any(nil)
	switch {
	case limiter.IsLease(norm.Kind):
		fields, err := leaseFields(norm)
		if err != nil {
			return limitd.Info{}, false, err
		}
		op = lua.ConfigureLease
		args = append([]any{mode, expected, string(cfg), s.Channel(), name, string(norm.Kind)}, fields...)
	default:
		p, err := limiter.Compile(norm)
		if err != nil {
			return limitd.Info{}, false, err
		}
		restart := "0"
		if verb == limiter.VerbRestart {
			restart = "1"
		}
		args = append([]any{mode, expected, string(cfg), restart, s.Channel(), name}, paramArgs(&p, 0)...)
	}
	v, err := s.run(ctx, op, s.limiterKeys(name), args...)
	if err != nil {
		return limitd.Info{}, false, err
	}
	r := &reply{v: v} // {code, version, changed[, replaced]}
	switch code := r.int(0); code {
	case replyUpdated, replyCreated:
		version, changed := r.int(1), r.flag(2)
		if r.has(3) && r.flag(3) { // another kind replaced: a new schedule
			s.floors.forget(name)
		}
		if err := r.check("configure", name); err != nil {
			return limitd.Info{}, false, err
		}
		if err := s.syncIndex(ctx, name, true); err != nil {
			return limitd.Info{}, false, err
		}
		return limitd.Info{Name: name, Config: norm, Version: version, Changed: changed}, code == replyCreated, nil
	case replyNotFound:
		return limitd.Info{}, false, fmt.Errorf("limiter %q: %w", name, ErrNotFound)
	case replyVersionMoved:
		return limitd.Info{}, false, errVersionMoved
	case replyKindChange:
		return limitd.Info{}, false, fmt.Errorf("%w: limiter %q is of another kind; PUT replaces a limiter with one of another kind", ErrConflict, name)
	default:
		r.fail(0, "not a reply code")
		return limitd.Info{}, false, r.check("configure", name)
	}
}

// Get returns a limiter's config and version, or ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (limitd.Info, error) {
	if err := limitd.CheckName(name); err != nil {
		return limitd.Info{}, err
	}
	v, err := s.rdb.HMGet(ctx, s.limiterKey(name), "cfg", "ver").Result()
	if err != nil {
		return limitd.Info{}, wrapErr(err)
	}
	return decodeInfo(name, v)
}

func decodeInfo(name string, v []any) (limitd.Info, error) {
	if len(v) > 0 && v[0] == nil {
		return limitd.Info{}, fmt.Errorf("limiter %q: %w", name, ErrNotFound)
	}
	r := &reply{v: v} // HMGET cfg ver
	cfg, version := r.str(0), r.int(1)
	if err := r.check("get", name); err != nil {
		return limitd.Info{}, err
	}
	var c limiter.Config
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		return limitd.Info{}, fmt.Errorf("store: limiter %q has an unreadable config: %w", name, err)
	}
	return limitd.Info{Name: name, Config: c, Version: version}, nil
}

// Delete removes a limiter and all its keys, or returns ErrNotFound.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := limitd.CheckName(name); err != nil {
		return err
	}
	v, err := s.scripts[lua.Delete].Run(ctx, s.rdb, s.limiterKeys(name), s.Channel(), name).Int64()
	if err != nil {
		return wrapErr(err)
	}
	s.floors.forget(name)
	// Even when there was nothing to delete: a Put may have raced this.
	if err := s.syncIndex(ctx, name, false); err != nil {
		return err
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
func (s *Store) List(ctx context.Context, cursor string, limit int) ([]limitd.Info, string, error) {
	if limit <= 0 || limit > MaxListLimit {
		return nil, "", &limiter.FieldError{Field: "limit", Rule: "must be ≥ 1 and ≤ 1000", Value: limit}
	}
	min := "-"
	if cursor != "" {
		min = "(" + cursor
	}
	// One name more tells whether another page follows.
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
	out := make([]limitd.Info, 0, len(names))
	for i, n := range names {
		info, err := decodeInfo(n, cmds[i].Val())
		if errors.Is(err, ErrNotFound) {
			// A stale entry (an index write that failed): drop it.
			_ = s.syncIndex(ctx, n, false)
			continue
		}
		if err != nil {
			return nil, "", err
		}
		out = append(out, info)
	}
	return out, next, nil
}

// syncIndex makes the index agree with whether limiter name exists, given
// that it existed (exists) at some moment after the caller's own change.
//
// The index is one sorted set and a limiter's keys live in its own cluster
// slot, so no script can change both atomically. Instead every change of a
// limiter's existence (configure, Delete) and every removal of a stale entry
// (List) is followed by syncIndex, which writes the index from an existence
// it read, then reads again and writes again until two reads agree. Once
// every operation has finished, the last index write for a name was followed
// by an agreeing read that came after the last change of existence, so the
// index holds the name exactly when the limiter exists. (Writing the index
// before the limiter exists let List drop a name for good.) A failed write
// is the caller's error: a Put answered 503 is retried, and List drops a
// stale entry on its next pass. It loops only while others create and
// delete the same name, and ctx ends it.
func (s *Store) syncIndex(ctx context.Context, name string, exists bool) error {
	for {
		var err error
		if exists {
			err = s.rdb.ZAdd(ctx, s.indexKey(), redis.Z{Member: name}).Err()
		} else {
			err = s.rdb.ZRem(ctx, s.indexKey(), name).Err()
		}
		if err != nil {
			return wrapErr(err)
		}
		now, err := s.rdb.HExists(ctx, s.limiterKey(name), "cfg").Result()
		if err != nil {
			return wrapErr(err)
		}
		if now == exists {
			return nil
		}
		exists = now
	}
}

// Changes delivers the change events published on Channel ("<name>
// <version>": a limiter put or patched, version 0 when deleted; "*template*
// 0": the templates changed) until ctx ends, and then closes. Events
// published while the subscription is down are lost, so a watcher that must
// not miss one also reads the state now and then.
func (s *Store) Changes(ctx context.Context) <-chan string {
	sub := s.rdb.Subscribe(ctx, s.Channel())
	out := make(chan string, 16)
	go func() {
		defer close(out)
		defer sub.Close()
		ch := sub.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				select {
				case out <- m.Payload:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}
