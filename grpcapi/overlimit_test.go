package grpcapi

import (
	"context"
	"testing"
	"time"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/envoyrules"
)

// stillClock is a local clock that stays at t0: an over-limit cache's
// entries never end while a test runs.
type stillClock struct{}

func (stillClock) Now() time.Time                             { return t0 }
func (stillClock) Sleep(context.Context, time.Duration) error { return nil }

// With the over-limit cache (LIMITD_GRPC_OVER_LIMIT_CACHE), a counter over
// its limit answers OVER_LIMIT without Redis: its hits are not counted in
// Redis, but they are in the rule's metrics, as over_limit. New rules
// (SetRules) empty the cache.
func TestOverLimitCacheRules(t *testing.T) {
	const cfg = `
domains:
  - domain: d
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
`
	e := newEnv(t, cfg, func(_ *Options, c *core.Options) { c.OverLimitCache, c.Clock = 16, stillClock{} })
	counted := func() int64 {
		t.Helper()
		n, err := e.st.FixedCounts(context.Background(), []string{e.counterName("d", envoyrules.Entry{Key: "user", Value: "ann"})}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return n[0]
	}
	e.expect(e.call("d", hits(desc("user", "ann"), 3)), over, lim(over, 2, minute, 0, 51*time.Second))
	e.expect(e.call("d", desc("user", "ann")), over, lim(over, 2, minute, 0, 51*time.Second)) // from the cache
	if n := counted(); n != 3 {
		t.Errorf("counted %d in Redis, want 3: the cached hit is not", n)
	}
	if o, h := e.counter(e.srv.m.over, "d", "user"), e.counter(e.srv.m.hits, "d", "user"); o != 2 || h != 4 {
		t.Errorf("over_limit %v, total_hits %v; want 2 (1 past the limit, then the cached one) and 4", o, h)
	}
	e.srv.SetRules(compile(t, cfg))
	e.expect(e.call("d", desc("user", "ann")), over, lim(over, 2, minute, 0, 51*time.Second))
	if n := counted(); n != 4 {
		t.Errorf("counted %d in Redis after new rules, want 4: asked again", n)
	}
}
