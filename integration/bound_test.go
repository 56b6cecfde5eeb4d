//go:build linux

package integration

// An acquire's bound and its cost in round trips when many callers share
// one `limitd serve`, with a TCP proxy (internal/testkit/faultproxy) between limitd
// and its redis-server that stalls Redis or slows it down. Every name here
// starts with bd.

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testkit/faultproxy"
	"github.com/limitd/limitd/internal/testkit/redistest"
)

const (
	// bdCallers is how many HTTP callers acquire at once.
	bdCallers = 16
	// bdBound is the bound on a decision's Redis part (core's
	// DecideTimeout), bdSlack what a busy 2-core machine may add to it
	// (measured: 2–17 ms on an idle one, up to 60 ms loaded).
	bdBound = 1500 * time.Millisecond
	bdSlack = 300 * time.Millisecond
)

var bdAcquire = fhProbe{"acquire", "POST", "/v1/limiters/bdl/acquire", `{"permits":1}`}

// bdServe starts a redis-server, a proxy in front of it and limitd serve
// through the proxy (query: the Redis URL's, "" for none), with a limiter
// bdl that grants every acquire.
func bdServe(t *testing.T, query string) (*svProc, *faultproxy.Proxy) {
	t.Helper()
	srv := redistest.Server(t)
	px := faultproxy.Start(t, srv.Addr())
	p := svServe(t, map[string]string{"LIMITD_REDIS_URL": "redis://" + px.Addr() + query, "LIMITD_PREFIX": "bd", "LIMITD_LOG_LEVEL": "error"})
	fhMust(t, p, "PUT", "/v1/limiters/bdl", `{"rate":1000000,"burst":"inf"}`, 201)
	bdBurst(p, bdCallers) // connections open, from the test to limitd and from limitd to Redis
	return p, px
}

// bdBurst sends n acquires at once and returns their answers.
func bdBurst(p *svProc, n int) []fhResult {
	out := make([]fhResult, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range out {
		wg.Go(func() {
			<-start
			out[i] = fhSend(p.base, "", bdAcquire)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// bdRecovered waits until an acquire is granted again.
func bdRecovered(t *testing.T, p *svProc) {
	t.Helper()
	svEventually(t, 10*time.Second, func() string {
		if r := fhSend(p.base, "", bdAcquire); r.code != http.StatusOK {
			return "acquire: " + r.body
		}
		return ""
	})
}

// TestBoundManyCallers: with Redis stalled, or 500 ms slower, 16 acquires
// that start 50 ms apart (each while the ones before wait) are each
// answered within the bound of one decision (1.5 s) and bdSlack, as one
// caller alone is; stalled, every answer is a 503. A call that arrives
// while batches are in flight no longer waits for one of them to end and
// then for a batch that ends at the latest bound of its calls. With the
// client's own timeouts (a 500 ms read) and with a read timeout of 5 s,
// which leaves the bound alone to end a call.
func TestBoundManyCallers(t *testing.T) {
	longTest(t)
	for _, query := range []string{"", "?read_timeout=5s&write_timeout=5s"} {
		p, px := bdServe(t, query)
		for _, fault := range []struct {
			name       string
			set, clear func()
		}{
			{"stalled", px.Stall, px.Resume},
			{"+500ms", func() { px.SetLatency(500 * time.Millisecond) }, func() { px.SetLatency(0) }},
		} {
			fault.set()
			res := bdStaggered(p, bdCallers, bdStagger)
			fault.clear()
			var slowest time.Duration
			codes := map[int]int{}
			for _, r := range res {
				slowest = max(slowest, r.took)
				codes[r.code]++
				if r.code != http.StatusServiceUnavailable && (r.code != http.StatusOK || fault.name == "stalled") {
					t.Errorf("Redis %s, URL %q: an acquire answered %d %s, want 503", fault.name, query, r.code, r.body)
				}
				if r.took > bdBound+bdSlack {
					t.Errorf("Redis %s, URL %q: an acquire took %v, over %v + %v", fault.name, query, r.took.Round(time.Millisecond), bdBound, bdSlack)
				}
			}
			t.Logf("Redis %s, URL %q: %d acquires %v apart: %v, slowest %v (bound %v + %v)",
				fault.name, query, bdCallers, bdStagger, codes, slowest.Round(100*time.Microsecond), bdBound, bdSlack)
			bdRecovered(t, p)
		}
	}
}

// bdStagger is the time between two callers' starts in TestBoundManyCallers.
const bdStagger = 30 * time.Millisecond

// bdStaggered sends n acquires, each every apart after the one before, and
// returns their answers.
func bdStaggered(p *svProc, n int, every time.Duration) []fhResult {
	out := make([]fhResult, n)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() { out[i] = fhSend(p.base, "", bdAcquire) })
		time.Sleep(every)
	}
	wg.Wait()
	return out
}

// bdLoop runs n callers acquiring in a loop for d and returns every answer,
// those in flight at the end included.
func bdLoop(p *svProc, n int, d time.Duration) []fhResult {
	var (
		mu  sync.Mutex
		res []fhResult
		wg  sync.WaitGroup
	)
	end := time.Now().Add(d)
	for range n {
		wg.Go(func() {
			for time.Now().Before(end) {
				r := fhSend(p.base, "", bdAcquire)
				mu.Lock()
				res = append(res, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res
}

// TestRoundTripsManyCallers: with Redis 50 ms away, 16 callers acquiring in
// a loop take about one round trip each (median below 1.5 × 50 ms), as one
// caller alone does, not the rest of another batch's round trip and then
// their own (about two, 102 ms, before).
func TestRoundTripsManyCallers(t *testing.T) {
	longTest(t)
	p, px := bdServe(t, "")
	const latency = 50 * time.Millisecond
	px.SetLatency(latency)
	measure := func(callers int, d time.Duration) []time.Duration {
		var took []time.Duration
		bad := 0
		for _, r := range bdLoop(p, callers, d) {
			took = append(took, r.took)
			if r.code != http.StatusOK {
				if bad++; bad <= 3 {
					t.Errorf("%d callers: %d %s", callers, r.code, r.body)
				}
			}
		}
		slices.Sort(took)
		return took
	}
	measure(bdCallers, 300*time.Millisecond) // warm up at this latency
	one := measure(1, time.Second)
	many := measure(bdCallers, 2500*time.Millisecond)
	p50 := func(d []time.Duration) time.Duration { return d[len(d)/2] }
	p90 := func(d []time.Duration) time.Duration { return d[len(d)*9/10] }
	t.Logf("Redis +%v: 1 caller: %d acquires, median %v, p90 %v; %d callers: %d acquires, median %v, p90 %v",
		latency, len(one), p50(one).Round(100*time.Microsecond), p90(one).Round(100*time.Microsecond),
		bdCallers, len(many), p50(many).Round(100*time.Microsecond), p90(many).Round(100*time.Microsecond))
	if m := p50(many); m >= latency*3/2 {
		t.Errorf("%d callers: median acquire %v, want below 1.5 × %v", bdCallers, m, latency)
	}
}
