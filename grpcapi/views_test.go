package grpcapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/envoyrules"
	"github.com/limitd/limitd/store"
	"github.com/limitd/limitd/wire"
)

const viewsRules = `
domains:
  - domain: d
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5}
      - key: plan
        limiter: {kind: window, limit: 5, period: 1m}
`

// getInstance is GET /v1/limiters/<name> of the HTTP API over e's service.
func getInstance(t *testing.T, e *env, name string) wire.Limiter {
	t.Helper()
	h := api.New(api.Options{Service: e.svc})
	t.Cleanup(h.Close)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/limiters/"+name, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", name, rec.Code, rec.Body)
	}
	var v wire.Limiter
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("GET %s: %v: %s", name, err, rec.Body)
	}
	if v.State == nil || v.State.Window == nil {
		t.Fatalf("GET %s: no window state: %s", name, rec.Body)
	}
	return v
}

// A rate_limit rule's counter, counted under the reference's counting in
// keys of its own, is shown by the HTTP API (and by core's views: Get,
// Views, Wait, what limitd ctl and the dashboard read) with its window's
// count: the remaining and reset the next call answers. Calls past the
// limit count too (remaining 0), and a new window starts from nothing.
func TestFixedCounterShown(t *testing.T) {
	e := newEnv(t, viewsRules)
	ctx := context.Background()
	name := e.counterName("d", envoyrules.Entry{Key: "user", Value: "ann"})
	for range 3 {
		e.call("d", desc("user", "ann"))
	}
	v := getInstance(t, e, name)
	w := v.State.Window
	if w.Limit != 5 || w.Remaining != 2 || w.Reset != int64(51*time.Second) || w.ResetAt != t0.Add(51*time.Second).UnixNano() ||
		!v.State.Started || v.State.Now != t0.UnixNano() {
		t.Errorf("after 3 calls: %+v, started %v, now %d; want 5, 2 remaining, reset in 51 s at %d", *w, v.State.Started, v.State.Now, t0.Add(51*time.Second).UnixNano())
	}
	// What the next call answers: 1 remaining after it.
	r := e.call("d", desc("user", "ann"))
	if s := r.Statuses[0]; s.LimitRemaining != uint32(w.Remaining-1) || s.DurationUntilReset.AsDuration() != time.Duration(w.Reset) {
		t.Errorf("next call: remaining %d, reset %v; the view said %d and %v", s.LimitRemaining, s.DurationUntilReset.AsDuration(), w.Remaining, time.Duration(w.Reset))
	}
	for range 3 { // 7 counted: past the limit
		e.call("d", desc("user", "ann"))
	}
	e.advance(30 * time.Second)
	l, err := e.svc.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if s := l.State; s.Wait != 0 || s.Delay != int64(21*time.Second) || s.Position != t0.Add(51*time.Second).UnixNano() || l.TTL != int64(21*time.Second) {
		t.Errorf("over, 30 s on: left %d, delay %v, end %d, ttl %v; want 0, 21 s, %d, 21 s", s.Wait, time.Duration(s.Delay), s.Position, time.Duration(l.TTL), t0.Add(51*time.Second).UnixNano())
	}
	views, errs := e.svc.Views(ctx, []limitd.Info{l.Info})
	if errs[0] != nil || views[0].State.Wait != 0 || !views[0].State.Started {
		t.Errorf("Views: %+v, %v; want 0 left", views[0].State, errs[0])
	}
	e.advance(30 * time.Second) // the next window: nothing counted in it
	wi, err := e.svc.Wait(ctx, name)
	if err != nil || wi.Wait != 5 || wi.Started || wi.Position != t0.Add(111*time.Second).UnixNano() {
		t.Errorf("next window: %+v, %v; want 5 left, not started, ending at %d", wi, err, t0.Add(111*time.Second).UnixNano())
	}

	// A limiter: rule counts in its instance's state, shown as it is.
	e.call("d", desc("plan", "p1"))
	e.call("d", desc("plan", "p1"))
	if w := getInstance(t, e, e.counterName("d", envoyrules.Entry{Key: "plan", Value: "p1"})).State.Window; w.Remaining != 3 {
		t.Errorf("limiter rule: %d remaining, want 3", w.Remaining)
	}
}

// A descriptor's own limit counts in a fixed window too, and is shown with
// its count.
func TestFixedOverrideShown(t *testing.T) {
	e := newEnv(t, viewsRules)
	for range 3 {
		e.call("d", limited(desc("user", "bob"), 4, typev3.RateLimitUnit_HOUR))
	}
	cs, _, err := e.srv.rules.Load().Counters("d", []envoyrules.Request{{Entries: []envoyrules.Entry{{Key: "user", Value: "bob"}}, Hits: 1,
		Override: &envoyrules.Override{Limit: 4, Unit: envoyrules.UnitHour}}}, func(limitd.Template) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if w := getInstance(t, e, cs[0].Name).State.Window; w.Limit != 4 || w.Remaining != 1 {
		t.Errorf("override: %+v, want 1 of 4 remaining", *w)
	}
}

// Which templates count in fixed windows is in Redis (the template's
// fixed_windows), so a process with no rules and no gRPC front end (a
// replica serving the HTTP API alone) shows and resets such a counter's
// window as the process that counts it does.
func TestFixedCounterShownByEveryProcess(t *testing.T) {
	e := newEnv(t, viewsRules)
	ctx := context.Background()
	name := e.counterName("d", envoyrules.Entry{Key: "user", Value: "ann"})
	for range 3 {
		e.call("d", desc("user", "ann"))
	}
	replica := core.New(store.New(e.rdb), core.Options{})
	l, err := replica.Get(ctx, name)
	if err != nil || l.State == nil || l.State.Wait != 2 || !l.State.Started {
		t.Fatalf("the replica's view: %+v, %v; want 2 left in a started window", l.State, err)
	}
	if tpl, err := replica.GetTemplate(ctx, l.Template); err != nil || !tpl.FixedWindows {
		t.Errorf("template %s: fixed_windows %v, %v; want true", l.Template, tpl.FixedWindows, err)
	}
	if _, err := replica.Reset(ctx, name); err != nil {
		t.Fatal(err)
	}
	if ks := windowKeys(e, name); len(ks) != 0 {
		t.Errorf("after the replica's reset: %v left", ks)
	}
	if s := e.call("d", desc("user", "ann")).Statuses[0]; s.LimitRemaining != 4 {
		t.Errorf("next call: %d remaining, want 4", s.LimitRemaining)
	}
}

// Under strict counting the counts are in the instances' state: the rules'
// templates are put without fixed_windows, and every process's view reads
// the state.
func TestStrictCounterShown(t *testing.T) {
	e := newEnv(t, viewsRules, strict)
	for range 3 {
		e.call("d", desc("user", "ann"))
	}
	name := e.counterName("d", envoyrules.Entry{Key: "user", Value: "ann"})
	if w := getInstance(t, e, name).State.Window; w.Remaining != 2 {
		t.Errorf("strict: %d remaining, want 2", w.Remaining)
	}
	l, err := core.New(store.New(e.rdb), core.Options{}).Get(context.Background(), name)
	if err != nil || l.State == nil || l.State.Wait != 2 {
		t.Errorf("strict, another process: %+v, %v; want 2 left", l.State, err)
	}
}

// serve sends method path to the HTTP API over e's service, and returns
// the status and body.
func serve(t *testing.T, e *env, method, path string) (int, string) {
	t.Helper()
	h := api.New(api.Options{Service: e.svc})
	t.Cleanup(h.Close)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Code, rec.Body.String()
}

// windowKeys are the window counts of name in e's Redis.
func windowKeys(e *env, name string) []string {
	var out []string
	for _, k := range e.mini.Keys() {
		if strings.HasPrefix(k, "limitd:{"+name+"}:n:") {
			out = append(out, k)
		}
	}
	return out
}

// A reset over the HTTP API of a counter counting in fixed windows starts
// its window afresh: its counts are deleted (the window now's and the one
// before it, still alive), the view and the reset's answer show the whole
// limit, and the next call counts from nothing. Other counters keep theirs.
func TestFixedCounterReset(t *testing.T) {
	e := newEnv(t, viewsRules)
	ann := e.counterName("d", envoyrules.Entry{Key: "user", Value: "ann"})
	bob := e.counterName("d", envoyrules.Entry{Key: "user", Value: "bob"})
	e.call("d", desc("user", "ann"))
	e.call("d", desc("user", "ann"))
	e.advance(time.Minute) // the next window; the last one's count is still in Redis
	for range 7 {          // past the limit
		e.call("d", desc("user", "ann"))
	}
	e.call("d", desc("user", "bob"))
	if ks := windowKeys(e, ann); len(ks) != 2 {
		t.Fatalf("before the reset: %v, want two windows' counts", ks)
	}
	if w := getInstance(t, e, ann).State.Window; w.Remaining != 0 {
		t.Fatalf("before the reset: %d remaining, want 0", w.Remaining)
	}

	code, body := serve(t, e, http.MethodPost, "/v1/limiters/"+ann+"/reset")
	if code != http.StatusOK {
		t.Fatalf("reset: %d %s", code, body)
	}
	var rw wire.WaitState
	if err := json.Unmarshal([]byte(body), &rw); err != nil || rw.Window == nil || rw.Window.Remaining != 5 {
		t.Errorf("reset answered %s (%v); want 5 remaining", body, err)
	}
	if ks := windowKeys(e, ann); len(ks) != 0 {
		t.Errorf("after the reset: %v left", ks)
	}
	v := getInstance(t, e, ann)
	end := t0.Add(111 * time.Second).UnixNano()
	if w := v.State.Window; w.Limit != 5 || w.Remaining != 5 || w.ResetAt != end || v.State.Started {
		t.Errorf("after the reset: %+v, started %v; want 5 of 5 remaining, not started, ending at %d", *w, v.State.Started, end)
	}
	if s := e.call("d", desc("user", "ann")).Statuses[0]; s.LimitRemaining != 4 || s.Code != rlv3.RateLimitResponse_OK {
		t.Errorf("next call: %v, %d remaining; want OK, 4", s.Code, s.LimitRemaining)
	}
	if w := getInstance(t, e, bob).State.Window; w.Remaining != 4 {
		t.Errorf("another counter: %d remaining, want 4 (untouched)", w.Remaining)
	}
}

// DELETE of such a counter removes its window counts with its state, as a
// reset does, and the next call counts from nothing. An instance is no
// limiter of its own: DELETE answers 404, as for any instance, its state
// removed all the same.
func TestFixedCounterDelete(t *testing.T) {
	e := newEnv(t, viewsRules)
	ann := e.counterName("d", envoyrules.Entry{Key: "user", Value: "ann"})
	for range 3 {
		e.call("d", desc("user", "ann"))
	}
	code, body := serve(t, e, http.MethodDelete, "/v1/limiters/"+ann)
	if code != http.StatusNotFound {
		t.Errorf("DELETE: %d %s, want 404", code, body)
	}
	if ks := windowKeys(e, ann); len(ks) != 0 {
		t.Errorf("after DELETE: %v left", ks)
	}
	if w := getInstance(t, e, ann).State.Window; w.Remaining != 5 {
		t.Errorf("after DELETE: %d remaining, want 5", w.Remaining)
	}
	if s := e.call("d", desc("user", "ann")).Statuses[0]; s.LimitRemaining != 4 {
		t.Errorf("next call: %d remaining, want 4", s.LimitRemaining)
	}
}
