package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/wire"
)

// sampled is an env whose signals sampler runs, its rounds driven by the
// test.
type sampled struct {
	*env
	svc  *core.Service
	h    *api.Handler
	tick chan time.Time
	now  time.Time // Redis' clock, as the test set it
}

// newSampled starts the sampler (Handler.Run) of a fresh env and waits for
// its first round, which it takes at once.
func newSampled(t *testing.T) *sampled {
	t.Helper()
	var svc *core.Service
	e := newEnv(t, func(o *api.Options) { svc = o.Service })
	s := &sampled{env: e, svc: svc, h: e.h.(*api.Handler), tick: make(chan time.Time), now: t0}
	e.sample(s.tick)
	eventually(t, "the first round", func() bool { return api.SignalRounds(s.h) == 1 })
	return s
}

// round moves Redis' clock by d and has the sampler take one round.
func (s *sampled) round(d time.Duration) {
	s.t.Helper()
	s.now = s.now.Add(d)
	s.m.SetTime(s.now)
	n := api.SignalRounds(s.h)
	s.tick <- time.Time{}
	eventually(s.t.(*testing.T), "a round", func() bool { return api.SignalRounds(s.h) == n+1 })
}

func (s *sampled) history(names string) wire.History {
	s.t.Helper()
	var h wire.History
	s.must(200, "GET", "/v1/history?limiters="+names, nil).decode(s.t, &h)
	return h
}

// Signals are rates between two rounds on Redis' clock, computed from what
// Redis holds; the wait is what a new caller would wait, as GET .../wait
// tells it at the same instant; the history keeps every round's, oldest
// first, and the state events carry the newest.
func TestHistorySignals(t *testing.T) {
	s := newSampled(t)
	s.must(201, "PUT", "/v1/limiters/a", `{"rate":10}`)
	s.round(time.Second) // a listed after the change: its first sample
	s.must(200, "POST", "/v1/limiters/a/acquire", `{"permits":5}`)
	s.round(time.Second)
	s.must(200, "POST", "/v1/limiters/a/acquire", `{"permits":20}`)
	s.round(time.Second)

	h := s.history("a,unknown")
	if h.Step != int64(time.Second) {
		t.Errorf("step_ns %d, want 1e9", h.Step)
	}
	if u, ok := h.Limiters["unknown"]; !ok || len(u) != 0 {
		t.Errorf("a limiter not sampled: %v, want an empty list", u)
	}
	a := h.Limiters["a"]
	if len(a) != 3 {
		t.Fatalf("a's history %+v, want 3 samples", a)
	}
	for i := 1; i < len(a); i++ {
		if a[i].T <= a[i-1].T {
			t.Errorf("history not oldest first: %+v", a)
		}
	}
	if a[0].GrantedPerS != 0 || a[0].Saturated || a[0].Wait != 0 {
		t.Errorf("first sample %+v, want nothing granted, not saturated", a[0])
	}
	if a[1].GrantedPerS != 5 || a[1].Wait != 0 || a[1].Saturated {
		t.Errorf("after 5 permits in 1 s: %+v, want 5/s, no wait, not saturated", a[1])
	}
	if a[1].Utilization != 0.5 {
		t.Errorf("utilization %v, want 5/s over rate 10", a[1].Utilization)
	}
	// Rates span the samples of the last RateSpan (5 s) of Redis time, or
	// all there are: 25 permits over 2 s.
	if a[2].GrantedPerS != 12.5 {
		t.Errorf("after 5 then 20 permits in 2 s: %+v, want 12.5/s", a[2])
	}
	if a[2].Utilization != 1.25 {
		t.Errorf("utilization %v, want 25 permits over 2 s over rate 10", a[2].Utilization)
	}
	delay := s.must(200, "GET", "/v1/limiters/a/wait", nil).num(t, "delay_ns")
	if delay <= 0 || a[2].Wait != delay || !a[2].Saturated {
		t.Errorf("behind its schedule: %+v, want wait_ns = delay_ns %d and saturated", a[2], delay)
	}
	if a[2].T != s.now.UnixNano() {
		t.Errorf("t_ns %d, want Redis' time %d", a[2].T, s.now.UnixNano())
	}

	// The state event carries the newest sample.
	events, stop := s.stream("/v1/events?limiters=a")
	defer stop()
	ev := next(t, events, func(ev sseEvent) bool { return ev.name == "state" })
	var le wire.LimiterEvent
	if err := json.Unmarshal([]byte(ev.data), &le); err != nil {
		t.Fatal(err)
	}
	if sg := le.Signals; sg == nil || sg.T != a[2].T || sg.GrantedPerS != a[2].GrantedPerS || sg.Utilization != a[2].Utilization ||
		sg.Wait != a[2].Wait || sg.Span != 2e9 || le.Name != "a" || le.State == nil ||
		sg.Permits == nil || *sg.Permits != 25 || sg.Backlog == nil || *sg.Backlog != le.State.Wait {
		t.Errorf("state event %s, want a's view with its last signals %+v", ev.data, a[2])
	}
	s.must(200, "HEAD", "/v1/history?limiters=a", nil)

	// The gauges read the same samples.
	if got := s.gauge(t, "limitd_limiter_wait_seconds", "a"); got != time.Duration(delay).Seconds() {
		t.Errorf("limitd_limiter_wait_seconds{a} %v, want %v", got, time.Duration(delay).Seconds())
	}
	if got := s.gauge(t, "limitd_limiter_utilization", "a"); got != 1.25 {
		t.Errorf("limitd_limiter_utilization{a} %v, want 1.25", got)
	}

	// A deleted limiter leaves the history.
	s.must(204, "DELETE", "/v1/limiters/a", nil)
	s.round(time.Second)
	if a := s.history("a").Limiters["a"]; len(a) != 0 {
		t.Errorf("a deleted limiter's history: %+v, want none", a)
	}
}

// gauge is the value of a gauge with the label limiter=name (-1: none).
func (e *env) gauge(t *testing.T, metric, name string) float64 {
	t.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limiter" && l.GetValue() == name {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// Utilization and wait by kind: a window's share of its limit taken and
// the time until it resets once full; a concurrency limiter's slots in use,
// free, and its next lease expiry; a share limiter's capacity held.
func TestSignalsKinds(t *testing.T) {
	s := newSampled(t)
	s.must(201, "PUT", "/v1/limiters/win", `{"kind":"window","limit":4,"period":"10s"}`)
	s.must(201, "PUT", "/v1/limiters/sem", `{"kind":"concurrency","limit":2,"lease":"30s"}`)
	s.must(201, "PUT", "/v1/limiters/cap", `{"kind":"share","capacity":10}`)
	s.round(time.Second)
	s.must(200, "POST", "/v1/limiters/win/acquire", `{"permits":1}`)
	s.must(200, "POST", "/v1/limiters/sem/acquire", nil)
	s.must(200, "POST", "/v1/limiters/cap/capacity", `{"client_id":"c1","wants":4}`)
	s.round(time.Second)
	h := s.history("win,sem,cap").Limiters
	last := func(n string) wire.Signals {
		if len(h[n]) == 0 {
			t.Fatalf("%s: no samples", n)
		}
		return h[n][len(h[n])-1]
	}
	if w := last("win"); w.Utilization != 0.25 || w.Wait != 0 || w.Saturated {
		t.Errorf("window 1 of 4: %+v, want utilization 0.25, no wait", w)
	}
	if c := last("sem"); c.Utilization != 0.5 || c.Wait != 0 || c.Saturated {
		t.Errorf("concurrency 1 of 2: %+v, want utilization 0.5, no wait", c)
	}
	if c := last("cap"); c.Utilization != 0.4 || c.Wait != 0 {
		t.Errorf("share 4 of 10 held: %+v, want utilization 0.4", c)
	}

	s.must(200, "POST", "/v1/limiters/win/acquire", `{"permits":3}`)
	s.must(200, "POST", "/v1/limiters/sem/acquire", nil)
	s.round(time.Second)
	h = s.history("win,sem").Limiters
	win := s.must(200, "GET", "/v1/limiters/win", nil).num(t, "state", "reset_ns")
	if w := last("win"); w.Utilization != 1 || w.Wait != win || !w.Saturated {
		t.Errorf("full window: %+v, want utilization 1, wait_ns = reset_ns %d, saturated", w, win)
	}
	var sem wire.Limiter
	s.must(200, "GET", "/v1/limiters/sem", nil).decode(t, &sem)
	// A full concurrency limiter's callers are refused, not queued, and a
	// slot frees when its holder releases it: no wait is claimed; its
	// earliest lease expiry is told as what it is.
	if c := last("sem"); c.Utilization != 1 || c.Wait != 0 || !c.Saturated {
		t.Errorf("full concurrency: %+v, want utilization 1, no wait claimed, saturated", c)
	}
	events, stop := s.stream("/v1/events?limiters=sem")
	defer stop()
	var le wire.LimiterEvent
	if err := json.Unmarshal([]byte(next(t, events, func(ev sseEvent) bool { return ev.name == "state" }).data), &le); err != nil {
		t.Fatal(err)
	}
	if sg := le.Signals; sg == nil || sg.InUse == nil || *sg.InUse != 2 || sg.Free == nil || *sg.Free != 0 ||
		sg.Limit == nil || *sg.Limit != 2 || sg.NextExpiry == nil || *sg.NextExpiry != sem.Holders[0].Expires {
		t.Errorf("full concurrency's signals %+v, want 2 in use of 2, 0 free, next lease expiry %d", sg, sem.Holders[0].Expires)
	}
}

// status is the data of a status event.
func statusOf(t *testing.T, ev sseEvent) wire.StreamStatus {
	t.Helper()
	var st wire.StreamStatus
	if err := json.Unmarshal([]byte(ev.data), &st); err != nil {
		t.Fatalf("status event %q: %v", ev.data, err)
	}
	return st
}

// A stream answers at once with a status event, also with no limiter and
// no sampler running.
func TestEventsStatusFirst(t *testing.T) {
	e := newEnv(t)
	events, stop := e.stream("/v1/events")
	defer stop()
	ev := next(t, events, func(sseEvent) bool { return true })
	if ev.name != "status" {
		t.Fatalf("first event %s %s, want status", ev.name, ev.data)
	}
	if st := statusOf(t, ev); st != (wire.StreamStatus{Redis: "ok", Ready: true}) {
		t.Errorf("status %+v, want redis ok, ready, no limiter", st)
	}
}

// The status follows what the sampler sees: the limiters it lists, Redis
// lost (limitd's marker gone: not ready, data_lost_at_ns at Redis' time of
// the finding) until the configuration is marked again, Redis down.
func TestEventsStatusChanges(t *testing.T) {
	s := newSampled(t)
	ctx := context.Background()
	if err := s.svc.Mark(ctx, ""); err != nil {
		t.Fatal(err)
	}
	events, stop := s.stream("/v1/events")
	defer stop()
	status := func() wire.StreamStatus {
		t.Helper()
		return statusOf(t, next(t, events, func(ev sseEvent) bool { return ev.name == "status" }))
	}
	if st := status(); st != (wire.StreamStatus{Redis: "ok", Ready: true}) {
		t.Errorf("on connect: %+v", st)
	}
	s.must(201, "PUT", "/v1/limiters/a", `{"rate":10}`)
	s.round(time.Second)
	if st := status(); st != (wire.StreamStatus{Redis: "ok", Ready: true, Limiters: 1}) {
		t.Errorf("after a PUT: %+v, want 1 limiter", st)
	}

	s.m.FlushAll()
	lostAt := s.now.UnixNano()
	r := s.must(503, "GET", "/readyz", nil)
	if p := r.problem(t); !strings.Contains(p.Detail, "lost limitd's data") {
		t.Errorf("/readyz after FLUSHALL: %s", r)
	}
	if n := s.metric("limitd_redis_data_lost_total"); n != 1 {
		t.Errorf("limitd_redis_data_lost_total %v, want 1", n)
	}
	s.round(time.Second)
	if st := status(); st != (wire.StreamStatus{Redis: "ok", DataLost: lostAt, Ready: false}) {
		t.Errorf("after the loss: %+v, want not ready, data_lost_at_ns %d, no limiter", st, lostAt)
	}
	if err := s.svc.Mark(ctx, ""); err != nil { // the configuration applied again
		t.Fatal(err)
	}
	s.must(200, "GET", "/readyz", nil)
	s.round(time.Second)
	if st := status(); st != (wire.StreamStatus{Redis: "ok", DataLost: lostAt, Ready: true}) {
		t.Errorf("marked again: %+v, want ready, the loss's time kept", st)
	}

	s.m.Close() // Redis down
	s.round(0)
	if st := status(); st.Redis != "unavailable" || st.Ready {
		t.Errorf("Redis down: %+v, want unavailable, not ready", st)
	}
}

func TestHistoryBadInput(t *testing.T) {
	e := newEnv(t)
	for _, q := range []string{"", "?limiters=", "?limiters=,", "?limiters=bad%20name"} {
		r := e.bad("GET", "/v1/history"+q, nil)
		if r.code != 400 {
			t.Errorf("%q: %s, want 400", q, r)
		}
		if p := r.problem(t); p.Field != "limiters" {
			t.Errorf("%q: %s, want a problem naming limiters", q, r)
		}
	}
}

// GET / leads to the dashboard.
func TestRootRedirects(t *testing.T) {
	e := newEnv(t)
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusFound || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /: %d to %q, want 302 to /ui/", rec.Code, rec.Header().Get("Location"))
	}
}

// With Redis down a stream still answers 200 at once, its status saying
// so, then the error of its first sample, and ends.
func TestEventsRedisDownAtConnect(t *testing.T) {
	e := newEnv(t)
	e.m.Close()
	events, stop := e.stream("/v1/events")
	defer stop()
	st := statusOf(t, next(t, events, func(sseEvent) bool { return true }))
	if st.Redis != "unavailable" || st.Ready {
		t.Errorf("status %+v, want redis unavailable, not ready", st)
	}
	ev := next(t, events, func(ev sseEvent) bool { return ev.name != "status" }) // the sampler's round tells it again
	if ev.name != "error" || !strings.Contains(ev.data, "unavailable") {
		t.Errorf("event %s %s, want the unavailable problem", ev.name, ev.data)
	}
	for end := false; !end; {
		select {
		case ev, ok := <-events:
			if ok && ev.name != "status" {
				t.Errorf("event %s %s after the error, want the stream to end", ev.name, ev.data)
			}
			end = !ok
		case <-time.After(5 * time.Second):
			t.Fatal("the stream did not end after its first sample failed")
		}
	}
}

// A round reads each limiter's live state once, its config only after a
// change: for rate limiters two commands per limiter per round (its state
// and its decision totals, in one pipeline).
func TestSignalsCost(t *testing.T) {
	s := newSampled(t)
	const n = 300
	for i := range n {
		s.must(201, "PUT", fmt.Sprintf("/v1/limiters/l%03d", i), `{"rate":100}`)
	}
	s.round(time.Second) // listed again after the changes, configs read
	var cmds atomic.Int64
	s.rdb.AddHook(countHook(&cmds))
	const rounds = 5
	per := make([]float64, rounds)
	start := time.Now()
	for i := range rounds {
		before := cmds.Load()
		s.round(time.Second)
		per[i] = float64(cmds.Load() - before)
	}
	took := time.Since(start)
	t.Logf("%d limiters: %v Redis commands in each round, %v a round (miniredis, test's wall clock)", n, per, took/rounds)
	// A change published by the PUTs above may reach the sampler a round
	// late on a busy machine, and then that round reads the configs again
	// (two commands more per limiter, once): the median round is the cost.
	sorted := slices.Clone(per)
	slices.Sort(sorted)
	if med := sorted[rounds/2]; med < 2*n || med > 2*n+n/10 {
		t.Errorf("%.1f commands in the median round for %d rate limiters, want two per limiter, the state and the totals (within 5%%)", med, n)
	}
	for i, c := range per {
		if c > 4*n+n/10 {
			t.Errorf("round %d: %.0f commands, more than a state, totals and one config read per limiter", i, c)
		}
	}
	if h := s.history("l000,l299").Limiters; len(h["l000"]) != rounds+1 || len(h["l299"]) != rounds+1 {
		t.Errorf("history lengths %d, %d, want %d", len(h["l000"]), len(h["l299"]), rounds+1)
	}
}
