package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/internal/testkit/logtest"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/wire"
)

// countHook counts in n the commands a Redis client sends, pipelined ones
// each.
func countHook(n *atomic.Int64) redistest.TripHook {
	return redistest.TripHook{Before: func(_ context.Context, cmds []redis.Cmder) { n.Add(int64(len(cmds))) }}
}

// counted is an open event stream whose "state" events are counted.
type counted struct {
	states atomic.Int64
	stop   func()
}

// openCounted opens url as an event stream; stop closes it and waits until
// its reader is done.
func openCounted(t *testing.T, url string) *counted {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	c := &counted{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "event: state" {
				c.states.Add(1)
			}
		}
	}()
	c.stop = func() {
		cancel()
		<-done
		resp.Body.Close()
	}
	t.Cleanup(c.stop)
	return c
}

// eventually polls cond until it holds, failing after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// A hang's bound, not a measure, so that a busy machine is not taken for
	// a hang: the sampler's rounds over 300 limiters on miniredis
	// (TestSignalsCost) share 2 cores with the suite and any busy loops.
	const hang = time.Minute
	for deadline := time.Now().Add(hang); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, hang)
		}
	}
}

// metric is the value of a metric without labels in e's registry (0 when
// it has no sample).
func (e *env) metric(name string) float64 {
	e.t.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name || len(f.GetMetric()) == 0 {
			continue
		}
		m := f.GetMetric()[0]
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue()
		}
		return m.GetCounter().GetValue()
	}
	return 0
}

// Every event stream, page and scrape reads the process's one sampler: 200
// streams, watching the same limiters every second and every 10 s, some by
// name and some all of them, with a scrape of /metrics and a read of
// /v1/history each round, cost Redis exactly what one stream does: one read
// of each limiter's view a round, over one subscription. Rounds are driven
// by the test, one per tick; a stream at 10 s takes every tenth.
func TestEventsShareRedis(t *testing.T) {
	e := newEnv(t)
	var names []string
	for i := range 8 {
		names = append(names, fmt.Sprintf("l%d", i))
		e.must(201, "PUT", "/v1/limiters/"+names[i], `{"rate":10}`)
	}
	names = append(names, "sem") // holders: a round trip of its own
	e.must(201, "PUT", "/v1/limiters/sem", `{"kind":"concurrency","limit":2}`)
	perRound := int64(len(names)) // state events a stream gets per sample

	var cmds atomic.Int64
	e.rdb.AddHook(countHook(&cmds))
	h := e.h.(*api.Handler)
	tick := make(chan time.Time)
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close) // after the streams' cleanups: it waits for them
	e.sample(tick)
	eventually(t, "the sampler's first round", func() bool { return api.SignalRounds(h) >= 1 })

	// measure sends ticks rounds, waiting after each until every stream
	// had its sample (want(j, k): stream j's state events after round k),
	// and returns the commands sent meanwhile. The loop takes the next
	// tick only once the round before it is handed out.
	const ticks = 10
	measure := func(streams []*counted, want func(j, k int) int64, readers bool) int64 {
		t.Helper()
		before := cmds.Load()
		for k := 1; k <= ticks; k++ {
			tick <- time.Time{}
			if readers {
				e.must(200, "GET", "/metrics", nil)
				e.must(200, "GET", "/v1/history?limiters="+strings.Join(names, ","), nil)
			}
			eventually(t, fmt.Sprintf("round %d", k), func() bool {
				for j, s := range streams {
					if s.states.Load() < want(j, k) {
						return false
					}
				}
				return true
			})
		}
		got := cmds.Load() - before
		for j, s := range streams {
			if n := s.states.Load(); n != want(j, ticks) {
				t.Errorf("stream %d: %d state events after %d rounds, want %d", j, n, ticks, want(j, ticks))
			}
		}
		return got
	}

	one := openCounted(t, srv.URL+"/v1/events?interval=1s")
	eventually(t, "the first sample", func() bool { return one.states.Load() == perRound })
	cost1 := measure([]*counted{one}, func(_, k int) int64 { return perRound * int64(1+k) }, false)
	one.stop()
	eventually(t, "the loop stops with its last stream", func() bool { return !api.EventLoopRunning(h) })

	const n = 200
	streams := make([]*counted, n)
	fast := func(j int) bool { return j%2 == 0 } // 1 s (asked as 100 ms: whole rounds); the others 10 s
	for j := range streams {
		q := "interval=100ms"
		if !fast(j) {
			q = "interval=10s"
		}
		if j%4 < 2 {
			q += "&limiters=" + strings.Join(names, ",")
		}
		streams[j] = openCounted(t, srv.URL+"/v1/events?"+q)
	}
	eventually(t, "every first sample", func() bool {
		for _, s := range streams {
			if s.states.Load() < perRound {
				return false
			}
		}
		return true
	})
	if subs := e.m.PubSubNumSub(e.st.Channel())[e.st.Channel()]; subs != 1 {
		t.Errorf("%d streams hold %d subscriptions to config changes, want 1", n, subs)
	}
	cost200 := measure(streams, func(j, k int) int64 {
		if fast(j) {
			return perRound * int64(1+k)
		}
		return perRound * int64(1+k/10)
	}, true)
	t.Logf("Redis commands per round: 1 stream %.1f, %d streams with a scrape and a history read %.1f (%d limiters)",
		float64(cost1)/ticks, n, float64(cost200)/ticks, perRound)
	if cost1 < perRound*ticks {
		t.Fatalf("1 stream: %d commands over %d rounds, want at least one per limiter per round", cost1, ticks)
	}
	// A scrape adds its read of the templates (a few commands, cached for
	// seconds); the limiters' views cost what one stream's did.
	if cost200 > cost1+ticks {
		t.Errorf("%d streams, scrapes and history reads cost %d commands over %d rounds, 1 stream %d: want the same, but a scrape's templates read",
			n, cost200, ticks, cost1)
	}
}

// Past Options.MaxEventStreams a stream is a 503 with Retry-After; a stream
// that ends makes room. Once the handler is closed every stream ends, the
// loop stops, and a new stream is a 503.
func TestEventsStreamCap(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.MaxEventStreams = 2 })
	e.must(201, "PUT", "/v1/limiters/a", `{"rate":10}`)
	a, stopA := e.stream("/v1/events?limiters=a&interval=100ms")
	defer stopA()
	_, stopB := e.stream("/v1/events?interval=100ms")
	next(t, a, func(ev sseEvent) bool { return ev.name == "state" })
	if got := e.metric("limitd_event_streams"); got != 2 {
		t.Errorf("limitd_event_streams %v, want 2", got)
	}
	r := e.must(503, "GET", "/v1/events?limiters=a", nil)
	if p := r.problem(t); p.Type != wire.ProblemType(wire.ProblemTooManyStreams) || !strings.Contains(p.Detail, "LIMITD_EVENTS_MAX_STREAMS") ||
		r.header.Get("Retry-After") != "10" {
		t.Errorf("past the cap: %s, Retry-After %q", r, r.header.Get("Retry-After"))
	}
	stopB()
	eventually(t, "the closed stream leaves", func() bool { return e.metric("limitd_event_streams") == 1 })
	_, stopC := e.stream("/v1/events?limiters=a")
	defer stopC()

	h := e.h.(*api.Handler)
	h.Close()
	if api.EventLoopRunning(h) {
		t.Error("the sampling loop runs after Close")
	}
	for range a { // the stream ends
	}
	r = e.must(503, "GET", "/v1/events?limiters=a", nil)
	if p := r.problem(t); p.Type != wire.ProblemType(wire.ProblemShuttingDown) {
		t.Errorf("after Close: %s", r)
	}
	if got := e.metric("limitd_event_streams"); got != 0 {
		t.Errorf("limitd_event_streams %v after Close, want 0", got)
	}
	e.must(200, "GET", "/v1/limiters/a", nil) // the rest is served as before
}

// smallBuffers keeps the server's sockets' send buffers small, so that a
// client that does not read blocks the server's writes after a few KB.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// A client that never reads is dropped once its stream falls a bounded
// number of samples behind: the connection closed, the stream counted in
// limitd_event_streams_dropped_total and logged once.
func TestEventsDropSlowReader(t *testing.T) {
	var logs logtest.Buffer
	e := newEnv(t, func(o *api.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("l%02d", i))
		e.must(201, "PUT", "/v1/limiters/"+names[i], `{"rate":10}`)
	}
	h := e.h.(*api.Handler)
	tick := make(chan time.Time)
	e.sample(tick)
	srv := httptest.NewUnstartedServer(e.h)
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(conn, "GET /v1/events?interval=1s&limiters=%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", strings.Join(names, ","))
	eventually(t, "the stream opens", func() bool { return api.OpenEventStreams(h) == 1 })
	// The client reads nothing. Each round the server writes ~7 KB until
	// the sockets' buffers are full; then samples wait for the stream
	// until it is StreamBuffer behind.
	rounds := 0
	for api.OpenEventStreams(h) != 0 {
		if rounds == 3000 {
			t.Fatalf("the stream is still open after %d rounds", rounds)
		}
		select {
		case tick <- time.Time{}:
		case <-time.After(10 * time.Second):
			t.Fatalf("the sampling loop took no round in 10 s (round %d)", rounds)
		}
		rounds++
	}
	if rounds < api.StreamBuffer {
		t.Errorf("dropped after %d rounds, want at least the buffer's %d", rounds, api.StreamBuffer)
	}
	eventually(t, "the drop counted", func() bool { return e.metric("limitd_event_streams_dropped_total") == 1 })
	if got := e.metric("limitd_event_streams"); got != 0 {
		t.Errorf("limitd_event_streams %v after the drop, want 0", got)
	}
	// The server closed the connection: what it wrote ends.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Errorf("reading the dropped stream to its end: %v", err)
	}
	if n := strings.Count(logs.String(), "event stream dropped"); n != 1 {
		t.Errorf("%d log lines of the drop, want 1:\n%s", n, logs.String())
	}
	t.Logf("dropped after %d rounds", rounds)
}

// A stream opened as the last one closes still gets its samples: the loop
// that found no stream left has stopped or a new one runs, never neither.
func TestEventsReopen(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/a", `{"rate":10}`)
	e.sample(nil)
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	for i := range 100 {
		s := openCounted(t, srv.URL+"/v1/events?limiters=a")
		eventually(t, fmt.Sprintf("stream %d's first sample", i), func() bool { return s.states.Load() >= 1 })
		s.stop()
	}
}
