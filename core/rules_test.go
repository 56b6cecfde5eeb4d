package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

// Every operation checks its input before it touches Redis: bad input is a
// *limiter.FieldError naming the field, and nothing is written.
func TestInputChecks(t *testing.T) {
	s, _, rec := newService(t)
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "r", limiter.Config{Rate: 1}); err != nil {
		t.Fatal(err)
	}
	rec.calls = nil
	many := make([]LimiterPermits, MaxAcquireAll+1)
	for _, c := range []struct {
		what  string
		call  func() error
		field string
	}{
		{"acquire of 0", func() error { _, err := s.Acquire(ctx, AcquireRequest{Name: "r"}); return err }, "permits"},
		{"acquire of too many limiters", func() error { _, err := s.AcquireAll(ctx, AcquireAllRequest{Requests: many}); return err }, "requests"},
		{"a negative charge", func() error { _, err := s.Charge(ctx, ChargeRequest{Name: "r", Permits: -1}); return err }, "permits"},
		{"a grant of 0", func() error { _, err := s.Grant(ctx, GrantRequest{Name: "r"}); return err }, "permits"},
		{"a handback of more than the grant", func() error {
			_, err := s.Handback(ctx, HandbackRequest{Name: "r", GrantPermits: 1, Permits: 2})
			return err
		}, "permits"},
		{"a lease id that is not one", func() error { return s.ReleaseSlot(ctx, "r", "nope") }, "lease_id"},
		{"a template id that is not a name", func() error {
			_, _, err := s.PutTemplate(ctx, limitd.Template{ID: "a b", Pattern: "a:*", Limiter: limiter.Config{Rate: 1}})
			return err
		}, "id"},
		{"a cursor that is not a name", func() error { _, err := s.List(ctx, "a b", 10); return err }, "cursor"},
		{"negative hits", func() error {
			_, err := s.Count(ctx, CountRequest{Counters: []Counter{{Name: "r", Hits: -1}}})
			return err
		}, "counters[0].hits"},
		{"a share client's negative wants", func() error {
			_, err := s.Capacity(ctx, CapacityRequest{Name: "r", ClientID: "c", Wants: -1})
			return err
		}, "wants"},
	} {
		var fe *limiter.FieldError
		if err := c.call(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want a field error naming %s", c.what, err, c.field)
		}
	}
	if len(rec.calls) != 0 {
		t.Errorf("bad input made store calls: %v", rec.calls)
	}
}

// Shadow mode, as core applies it to every front end: a refusal of a
// limiter in shadow mode (its own config, or the service's Options.Shadow)
// is a grant that took nothing, reported "shadow"; a refusal of another
// limiter stands.
func TestShadowRules(t *testing.T) {
	for _, c := range []struct {
		name         string
		own, service bool
		granted      bool
		outcome      string
	}{
		{"neither", false, false, false, "denied"},
		{"the limiter's", true, false, true, "shadow"},
		{"the service's", false, true, true, "shadow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, st, rec := newService(t)
			s := New(st, Options{Observer: rec, Shadow: c.service})
			ctx := context.Background()
			if _, _, err := s.Put(ctx, "r", limiter.Config{Rate: 1, Burst: limiter.B(1), Shadow: c.own}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Put(ctx, "slots", limiter.Config{Kind: limiter.KindConcurrency, Limit: ptr[int64](1), Lease: limiter.D(time.Minute), Shadow: c.own}); err != nil {
				t.Fatal(err)
			}
			s.Acquire(ctx, AcquireRequest{Name: "r", Permits: 1})
			s.Acquire(ctx, AcquireRequest{Name: "slots"})
			rec.events = nil
			a, err := s.Acquire(ctx, AcquireRequest{Name: "r", Permits: 1, MaxWait: 0, Given: Given{Permits: true, MaxWait: true}})
			if err != nil || a.Rate.Granted != c.granted || a.Rate.Shadow != c.granted {
				t.Errorf("rate: %+v, %v; want granted %v", a.Rate, err, c.granted)
			}
			sl, err := s.Acquire(ctx, AcquireRequest{Name: "slots"})
			if err != nil || sl.Slot.Granted != c.granted || sl.Slot.Shadow != c.granted || sl.Slot.ID != "" {
				t.Errorf("slot: %+v, %v; want granted %v without a lease", sl.Slot, err, c.granted)
			}
			all, err := s.AcquireAll(ctx, AcquireAllRequest{Requests: []LimiterPermits{{"r", 1}}})
			if err != nil || all.Granted != c.granted {
				t.Errorf("several limits: %+v, %v; want granted %v", all, err, c.granted)
			}
			for i, e := range rec.events {
				if e.Outcome != c.outcome {
					t.Errorf("event %d: %+v, want outcome %s", i, e, c.outcome)
				}
			}
			if len(rec.events) != 3 {
				t.Errorf("%d events, want 3: %+v", len(rec.events), rec.events)
			}
		})
	}
}

// Given tells a concurrency limiter's acquire, which takes no settings,
// from one that set some: the first set is the field at fault.
func TestGiven(t *testing.T) {
	for _, c := range []struct {
		g     Given
		first string
	}{
		{Given{}, ""},
		{Given{Block: true}, "block"},
		{Given{MaxWait: true, Block: true}, "max_wait"},
		{Given{Permits: true, MaxWait: true}, "permits"},
	} {
		if got := c.g.first(); got != c.first || c.g.none() != (c.first == "") {
			t.Errorf("%+v: first %q, none %v; want %q", c.g, got, c.g.none(), c.first)
		}
	}
}
