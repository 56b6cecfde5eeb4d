package clientmetrics_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/clientmetrics"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/internal/testkit/storetest"
	"github.com/limitd/limitd/limiter"
)

// The collector counts the permits a handle took from the shared schedule
// and its calls to Redis, and shows its fallback mode and the permits it
// gave then.
func TestCollector(t *testing.T) {
	m, rdb, st := storetest.Mini(t, func(o *redis.Options) { o.MaxRetries = -1 })
	if _, _, err := st.Put(context.Background(), "api", limiter.Config{Rate: 1e6, Burst: limiter.B(inf)}); err != nil {
		t.Fatal(err)
	}
	c := redisclient.New(rdb)
	defer c.Close()
	l, err := c.Limiter("api", client.WithFallback(client.FallbackOptimistic))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if !l.Allow() {
			t.Fatal("Allow at 1e6/s refused")
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(clientmetrics.New(c))
	if got := value(t, reg, "limitd_client_fallback", ""); got != 0 {
		t.Errorf("limitd_client_fallback = %v", got)
	}
	if got := value(t, reg, "limitd_client_remote_calls_total", ""); got < 1 {
		t.Errorf("limitd_client_remote_calls_total = %v", got)
	}
	if got := value(t, reg, "limitd_client_permits_total", "shared"); got != 5 {
		t.Errorf("shared permits %v, want 5", got)
	}
	s := l.Stats()
	if s.RemoteCalls < 1 || s.SharedPermits != 5 || s.FallbackPermits != 0 || s.Fallback {
		t.Errorf("stats %+v", s)
	}

	m.Close() // Redis gone: the handle falls back (optimistic: every permit allowed)
	deadline := time.Now().Add(10 * time.Second)
	for !l.Stats().Fallback {
		if time.Now().After(deadline) {
			t.Fatalf("no fallback 10 s after Redis went away: %+v", l.Stats())
		}
		l.Allow()
	}
	for range 3 {
		l.Allow()
	}
	s = l.Stats()
	if !s.Fallback || s.FallbackPermits < 3 {
		t.Errorf("in fallback: %+v", s)
	}
	if got := value(t, reg, "limitd_client_fallback", ""); got != 1 {
		t.Errorf("limitd_client_fallback = %v in fallback", got)
	}
}

var inf = math.Inf(1)

// value is the value of the one series of name (with label source, if
// not empty) in reg.
func value(t *testing.T, reg *prometheus.Registry, name, source string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			ok := source == ""
			for _, lp := range m.Label {
				if lp.GetName() == "source" && lp.GetValue() == source {
					ok = true
				}
			}
			if ok {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s{source=%q}", name, source)
	return 0
}
