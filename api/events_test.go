package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/wire"
)

// sseEvent is one event of GET /v1/events.
type sseEvent struct {
	name string
	data string
}

// stream opens GET path on a real server over e's handler and returns its
// events as they come, and a stop function; the answer is checked against
// openapi.yaml once stopped. The handler's sampler runs from then on.
func (e *env) stream(path string) (<-chan sseEvent, func()) {
	t := e.t
	t.Helper()
	if !e.sampling {
		e.sample(nil)
	}
	srv := httptest.NewServer(e.h)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 64)
	var body strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			body.WriteString(line + "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.name != "":
				out <- ev
				ev = sseEvent{}
			}
		}
	}()
	return out, func() {
		cancel()
		<-done
		resp.Body.Close()
		srv.Close()
		vreq := httptest.NewRequest("GET", "http://limitd.test"+path, nil)
		if e.token != "" {
			vreq.Header.Set("Authorization", "Bearer "+e.token)
		}
		e.validate(true, vreq, &reply{code: resp.StatusCode, header: resp.Header, body: []byte(body.String())})
	}
}

// next returns the next event that matches, failing after a few seconds.
func next(t *testing.T, events <-chan sseEvent, match func(sseEvent) bool) sseEvent {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the stream ended")
			}
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatal("no such event within 5s")
		}
	}
}

func stateOf(t *testing.T, ev sseEvent) wire.Limiter {
	t.Helper()
	var l wire.Limiter
	if err := json.Unmarshal([]byte(ev.data), &l); err != nil {
		t.Fatalf("state event %q: %v", ev.data, err)
	}
	return l
}

// The stream samples the named limiters' states every interval and tells
// each config change as it is published.
func TestEventsNamed(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/a", `{"rate":10}`)
	e.must(201, "PUT", "/v1/limiters/sem", `{"kind":"concurrency","limit":2}`)
	e.must(201, "PUT", "/v1/limiters/other", `{"rate":1}`)
	events, stop := e.stream("/v1/events?limiters=a,sem&interval=100ms")
	defer stop()
	a := stateOf(t, next(t, events, func(ev sseEvent) bool { return ev.name == "state" && strings.Contains(ev.data, `"name":"a"`) }))
	if a.State == nil || a.Version != 1 || a.Config.Rate != 10 {
		t.Errorf("state of a: %+v", a)
	}
	sem := stateOf(t, next(t, events, func(ev sseEvent) bool { return ev.name == "state" && strings.Contains(ev.data, `"name":"sem"`) }))
	if sem.InUse == nil || *sem.InUse != 0 {
		t.Errorf("state of sem: %+v", sem)
	}
	e.must(200, "PATCH", "/v1/limiters/other", `{"rate":2}`) // not watched: no event
	e.must(200, "PATCH", "/v1/limiters/a", `{"rate":20}`)
	ch := next(t, events, func(ev sseEvent) bool { return ev.name == "config" })
	if ch.data != `{"limiter":"a","version":2}` {
		t.Errorf("config event %s, want a's version 2", ch.data)
	}
	a = stateOf(t, next(t, events, func(ev sseEvent) bool {
		return ev.name == "state" && strings.Contains(ev.data, `"name":"a"`) && strings.Contains(ev.data, `"version":2`)
	}))
	if a.Config.Rate != 20 {
		t.Errorf("state of a after the change: %+v", a)
	}
}

// Without ?limiters the stream watches every limiter, and a deleted one is
// told and no longer sampled.
func TestEventsAll(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/x", `{"rate":10}`)
	e.must(201, "PUT", "/v1/limiters/y", `{"rate":10}`)
	events, stop := e.stream("/v1/events?interval=100ms")
	defer stop()
	for _, n := range []string{"x", "y"} {
		next(t, events, func(ev sseEvent) bool { return ev.name == "state" && strings.Contains(ev.data, `"name":"`+n+`"`) })
	}
	e.must(204, "DELETE", "/v1/limiters/y", nil)
	next(t, events, func(ev sseEvent) bool { return ev.name == "config" && ev.data == `{"limiter":"y","version":0}` })
	e.must(201, "PUT", "/v1/limiters/z", `{"rate":10}`) // a new limiter joins the stream
	next(t, events, func(ev sseEvent) bool { return ev.name == "state" && strings.Contains(ev.data, `"name":"z"`) })
	// Two full rounds after the deletion: y is sampled no more.
	for range 4 {
		if ev := next(t, events, func(ev sseEvent) bool { return ev.name == "state" }); strings.Contains(ev.data, `"name":"y"`) {
			t.Fatalf("a deleted limiter is still sampled: %s", ev.data)
		}
	}
}

func TestEventsBadInput(t *testing.T) {
	e := newEnv(t)
	for _, q := range []string{"interval=1ms", "interval=2h", "interval=soon", "limiters=bad%20name", "limiters=,"} {
		r := e.must(400, "GET", "/v1/events?"+q, nil)
		if p := r.problem(t); p.Field != "interval" && p.Field != "limiters" {
			t.Errorf("?%s: %s", q, r)
		}
	}
}
