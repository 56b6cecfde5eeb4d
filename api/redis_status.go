package api

import (
	"errors"
	"net/http"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/wire"
)

// redisCauses words each cause of unavailability core knows (core.RedisCause)
// on the wire, once for every reader: the problem type of its 503s, and the
// "redis" of the event status, of /readyz and of those problems.
var redisCauses = map[core.RedisCause]struct{ slug, redis string }{
	core.RedisCauseOther:        {wire.ProblemUnavailable, wire.RedisUnavailable},
	core.RedisCauseUnauthorized: {wire.ProblemRedisUnauthorized, wire.RedisUnauthorized},
	core.RedisCauseLoading:      {wire.ProblemRedisLoading, wire.RedisLoading},
	core.RedisCauseReadOnly:     {wire.ProblemRedisReadOnly, wire.RedisReadOnly},
}

// unavailableProblem is the 503 of err, which matches core.ErrUnavailable:
// its type and "redis" say the cause, its detail the condition and its fix.
func unavailableProblem(svc *core.Service, err error) *problem {
	w := redisCauses[core.RedisCauseOf(err)]
	p := newProblem(http.StatusServiceUnavailable, w.slug, unavailableDetail(svc, err))
	if !errors.Is(err, core.ErrDataLost) && !unknownLayout(err) {
		p.Redis = w.redis // a data loss or one limiter's layout is not Redis failing
	}
	return p
}

// unavailableDetail names the condition that keeps Redis from serving
// (READONLY, WRONGPASS, timeout, ...) and, for a known cause, the setting to
// fix, without echoing Redis' own text, which may hold addresses.
func unavailableDetail(svc *core.Service, err error) string {
	const rest = "so limitd can neither decide nor change limiters"
	if errors.Is(err, core.ErrDataLost) {
		return "Redis lost limitd's data (its marker is gone: a restart without persistence?); limitd is applying its boot configuration again"
	}
	u, ok := svc.Unavailability(err)
	if !ok {
		return "Redis is unavailable, " + rest + "; retry later"
	}
	if u.OneLimiter {
		return "this limiter cannot be served by this limitd (" + u.Description + ")"
	}
	if u.Fix != "" {
		return "Redis cannot serve (" + u.Description + "), " + rest + ": " + u.Fix
	}
	return "Redis is unavailable (" + u.Description + "), " + rest + "; retry later"
}

// redisUp is the status's "redis" while Redis serves: embedded for serve's
// own in-memory Redis, which no other process shares.
func redisUp(embedded bool) string {
	if embedded {
		return wire.RedisEmbedded
	}
	return wire.RedisOK
}
