package core

import (
	"errors"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

// A refusal by one limiter refuses the call: the observer sees it denied
// and the others voided; a granted call reports each limiter granted.
func TestAcquireAll(t *testing.T) {
	s, _, rec := newService(t)
	ctx := t.Context()
	for _, n := range []string{"a", "b"} {
		if _, _, err := s.Put(ctx, n, limiter.Config{Rate: 1, Burst: limiter.B(1)}); err != nil {
			t.Fatal(err)
		}
	}
	req := AcquireAllRequest{Requests: []LimiterPermits{{"a", 1}, {"b", 0}}, MaxWait: 0}
	r, err := s.AcquireAll(ctx, req)
	if err != nil || !r.Granted || len(r.Results) != 2 || r.Results[0].Permits != 1 || r.Results[1].Permits != 0 {
		t.Fatalf("first call: %+v, %v", r, err)
	}
	// a owes 1 s now; b is untouched (checked) and grants.
	req.Requests = []LimiterPermits{{"b", 1}, {"a", 1}}
	r, err = s.AcquireAll(ctx, req)
	if err != nil || r.Granted || !r.Results[0].Granted || r.Results[1].Granted {
		t.Fatalf("second call: %+v, %v", r, err)
	}
	want := []Event{
		{Kind: EventRate, Limiter: "a", Outcome: "granted", Permits: 1},
		{Kind: EventRate, Limiter: "b", Outcome: "granted", Permits: 0},
		{Kind: EventRate, Limiter: "b", Outcome: "voided", Permits: 1},
		{Kind: EventRate, Limiter: "a", Outcome: "denied", Permits: 1},
	}
	if len(rec.events) != len(want) {
		t.Fatalf("events %+v, want %+v", rec.events, want)
	}
	for i := range want {
		if rec.events[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, rec.events[i], want[i])
		}
	}
	// b took nothing: its first permit is still there.
	a, err := s.Acquire(ctx, AcquireRequest{Name: "b", Permits: 1, MaxWait: 0})
	if err != nil || !a.Rate.Granted {
		t.Errorf("b after a refused call: %+v, %v", a, err)
	}
	_, err = s.AcquireAll(ctx, AcquireAllRequest{Requests: []LimiterPermits{{"a", 1}, {"nope", 1}}})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing limiter: %v", err)
	}
	_, err = s.AcquireAll(ctx, AcquireAllRequest{Requests: []LimiterPermits{{"a", 1}, {"a", 1}}})
	var fe *limiter.FieldError
	if !errors.As(err, &fe) || fe.Field != "requests[1].name" {
		t.Errorf("a limiter named twice: %v", err)
	}
}

// A limiter in shadow mode never refuses: its refusal is a grant marked
// shadow that took nothing, in Acquire and in AcquireAll (where the others
// take their permits), and the observer sees outcome "shadow".
func TestShadow(t *testing.T) {
	s, st, rec := newService(t)
	ctx := t.Context()
	if _, _, err := s.Put(ctx, "sh", limiter.Config{Rate: 1, Burst: limiter.B(1), Shadow: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Put(ctx, "real", limiter.Config{Rate: 1, Burst: limiter.B(1)}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true, true} {
		a, err := s.Acquire(ctx, AcquireRequest{Name: "sh", Permits: 1, MaxWait: 0})
		if err != nil || !a.Rate.Granted || a.Rate.Shadow != want || a.Rate.Permits != 1 || a.Rate.Delay != 0 {
			t.Fatalf("acquire %d: %+v, %v", i, a.Rate, err)
		}
	}
	w, err := st.Wait(ctx, "sh")
	if err != nil || w.Permits != 1 {
		t.Errorf("shadow limiter's permits: %+v, %v, want 1 (shadow grants take nothing)", w, err)
	}
	r, err := s.AcquireAll(ctx, AcquireAllRequest{Requests: []LimiterPermits{{"real", 1}, {"sh", 1}}, MaxWait: 0})
	if err != nil || !r.Granted || !r.Results[0].Granted || r.Results[0].Shadow || !r.Results[1].Shadow {
		t.Fatalf("AcquireAll with a shadow refusal: %+v, %v", r, err)
	}
	if w, _ := st.Wait(ctx, "real"); w.Permits != 1 {
		t.Errorf("real's permits %d, want 1", w.Permits)
	}
	// A real refusal still refuses the call.
	r, err = s.AcquireAll(ctx, AcquireAllRequest{Requests: []LimiterPermits{{"real", 1}, {"sh", 1}}, MaxWait: 0})
	if err != nil || r.Granted {
		t.Fatalf("AcquireAll refused by real: %+v, %v", r, err)
	}
	shadows := 0
	for _, e := range rec.events {
		if e.Outcome == "shadow" {
			shadows++
		}
	}
	if shadows != 3 {
		t.Errorf("%d shadow events, want 3: %+v", shadows, rec.events)
	}

	// Options.Shadow: every limiter.
	all := New(st, Options{Shadow: true})
	a, err := all.Acquire(ctx, AcquireRequest{Name: "real", Permits: 1, MaxWait: 0})
	if err != nil || !a.Rate.Granted || !a.Rate.Shadow {
		t.Errorf("global shadow mode: %+v, %v", a.Rate, err)
	}
	// A template's shadow applies to its instances.
	if _, _, err := s.PutTemplate(ctx, limitd.Template{ID: "u", Pattern: "u:*", Limiter: limiter.Config{Rate: 1, Burst: limiter.B(1), Shadow: true}}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		a, err := s.Acquire(ctx, AcquireRequest{Name: "u:1", Permits: 1, MaxWait: 0})
		if err != nil || !a.Rate.Granted || a.Rate.Shadow != (i == 1) {
			t.Errorf("instance acquire %d: %+v, %v", i, a.Rate, err)
		}
	}
}

// A blocking AcquireAll waits out the longest delay of its grants.
func TestAcquireAllBlocks(t *testing.T) {
	_, st, _ := newService(t)
	clk := &fakeClock{}
	s := New(st, Options{Clock: clk})
	ctx := t.Context()
	for _, c := range []struct {
		name string
		rate float64
	}{{"fast", 10}, {"slow", 4}} {
		if _, _, err := s.Put(ctx, c.name, limiter.Config{Rate: c.rate, Burst: limiter.B(1)}); err != nil {
			t.Fatal(err)
		}
	}
	req := AcquireAllRequest{Requests: []LimiterPermits{{"fast", 1}, {"slow", 1}}, MaxWait: limitd.Forever, Block: true}
	for range 2 {
		if r, err := s.AcquireAll(ctx, req); err != nil || !r.Granted {
			t.Fatalf("%+v, %v", r, err)
		}
	}
	// The first call starts at once; the second waits 100 ms for fast and
	// 250 ms for slow.
	if len(clk.slept) != 1 || clk.slept[0] != 250*time.Millisecond {
		t.Errorf("slept %v, want [250ms]", clk.slept)
	}
}

// A concurrency limiter in shadow mode lets a refused slot through without
// a lease.
func TestShadowSlot(t *testing.T) {
	s, st, rec := newService(t)
	ctx := t.Context()
	if _, _, err := s.Put(ctx, "sem", limiter.Config{Kind: limiter.KindConcurrency, Limit: ptr[int64](1), Shadow: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		a, err := s.Acquire(ctx, AcquireRequest{Name: "sem", Permits: 1, MaxWait: limitd.Forever})
		if err != nil || a.Slot == nil || !a.Slot.Granted || a.Slot.Shadow != (i == 1) || (a.Slot.ID == "") != (i == 1) {
			t.Fatalf("slot acquire %d: %+v, %v", i, a.Slot, err)
		}
	}
	if n := len(rec.events); n != 2 || rec.events[1].Kind != EventSlot || rec.events[1].Outcome != "shadow" {
		t.Errorf("events %+v", rec.events)
	}
	if h, err := st.Holders(ctx, "sem"); err != nil || len(h.Slots) != 1 {
		t.Errorf("holders after a shadow slot: %+v, %v, want the one lease", h, err)
	}
}
