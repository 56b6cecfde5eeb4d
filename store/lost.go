package store

import (
	"cmp"
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Lost reports which of the named limiters and templates Redis lost: a
// limiter whose config is gone or that the index (List) does not name, a
// template the template table lacks. Every name is checked (a cluster shard
// loses only its own slots), in one pipeline. When some checks fail, the
// names found lost are returned with an error wrapping ErrUnavailable.
func (s *Store) Lost(ctx context.Context, limiters, templates []string) (lostLimiters, lostTemplates []string, err error) {
	if len(limiters) == 0 && len(templates) == 0 {
		return nil, nil, nil
	}
	pipe := s.rdb.Pipeline()
	exists := make([]*redis.IntCmd, len(limiters))
	listed := make([]*redis.FloatCmd, len(limiters))
	for i, name := range limiters {
		exists[i] = pipe.Exists(ctx, s.limiterKey(name))
		listed[i] = pipe.ZScore(ctx, s.indexKey(), name)
	}
	held := make([]*redis.BoolCmd, len(templates))
	for i, id := range templates {
		held[i] = pipe.HExists(ctx, s.templatesKey(), id)
	}
	pipelineErr(pipe.Exec(ctx)) // each command's own error is read below

	var first error
	for i, name := range limiters {
		n, err1 := exists[i].Result()
		_, err2 := listed[i].Result()
		switch {
		case err1 != nil:
			first = cmp.Or(first, err1)
		case n == 0 || errors.Is(err2, redis.Nil):
			lostLimiters = append(lostLimiters, name)
		default:
			first = cmp.Or(first, err2)
		}
	}
	for i, id := range templates {
		ok, err := held[i].Result()
		if first = cmp.Or(first, err); err == nil && !ok {
			lostTemplates = append(lostTemplates, id)
		}
	}
	return lostLimiters, lostTemplates, wrapErr(first)
}

func (s *Store) markerKey() string { return s.prefix + ":boot" }

// Mark writes limitd's marker, sum as its value (the applied
// configuration's hash, for an operator to read).
func (s *Store) Mark(ctx context.Context, sum string) error {
	return wrapErr(s.rdb.Set(ctx, s.markerKey(), sum, 0).Err())
}

// Marked reports whether limitd's marker is there, and Redis' time (Unix
// ns) as it answered, in one round trip.
func (s *Store) Marked(ctx context.Context) (marked bool, now int64, err error) {
	pipe := s.rdb.Pipeline()
	exists := pipe.Exists(ctx, s.markerKey())
	t := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, 0, wrapErr(err)
	}
	return exists.Val() == 1, t.Val().UnixNano(), nil
}
