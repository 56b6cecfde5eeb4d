package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// fakeStore answers the calls of an acquire, a slot's renewal and release
// from a table of limiters, with no Redis: what the service makes of each
// answer is its own rule. A call it does not fake panics (the embedded
// backend is nil).
type fakeStore struct {
	backend
	limiters map[string]limiter.Config
	decision limitd.Decision  // what a rate limiter answers
	slot     limitd.SlotLease // what a concurrency limiter answers
	held     bool             // the lease given to RenewSlot and ReleaseSlot is held
}

func (f *fakeStore) Get(_ context.Context, name string) (limitd.Info, error) {
	c, ok := f.limiters[name]
	if !ok {
		return limitd.Info{}, fmt.Errorf("limiter %q: %w", name, limiter.ErrNotFound)
	}
	return limitd.Info{Name: name, Config: c, Version: 1}, nil
}

func (f *fakeStore) Resolve(context.Context, string) (limitd.Template, error) {
	return limitd.Template{}, limiter.ErrNotFound
}

func (f *fakeStore) AcquireWithin(ctx context.Context, name string, _ int64, _, _ time.Duration) (limitd.Decision, error) {
	info, err := f.Get(ctx, name)
	if err != nil {
		return limitd.Decision{}, err
	}
	if !limiter.IsRate(info.Config.Kind) {
		return limitd.Decision{}, fmt.Errorf("limiter %q: %w", name, limiter.ErrConflict)
	}
	return f.decision, nil
}

func (f *fakeStore) AcquireSlot(context.Context, string) (limitd.SlotLease, error) {
	return f.slot, nil
}

func (f *fakeStore) RenewSlot(_ context.Context, name, id string) (limitd.SlotLease, error) {
	if !f.held {
		return limitd.SlotLease{}, limiter.ErrNotFound
	}
	return limitd.SlotLease{Granted: true, Expires: 1}, nil
}

func (f *fakeStore) ReleaseSlot(context.Context, string, string) error {
	if !f.held {
		return limiter.ErrNotFound
	}
	return nil
}

// The rules of Acquire over each answer of the store: the kind dispatch
// (a rate kind takes permits, a concurrency limiter a slot, a share limiter
// is a conflict), shadow mode (a refusal reported as a grant that took
// nothing), the checks before any call, and the store calls each costs
// (timed once each, as the Op it is).
func TestAcquireRules(t *testing.T) {
	rate := limiter.Config{Kind: limiter.KindSchedule, Rate: 10}
	shadowRate := limiter.Config{Kind: limiter.KindSchedule, Rate: 10, Shadow: true}
	slots := limiter.Config{Kind: limiter.KindConcurrency}
	shadowSlots := limiter.Config{Kind: limiter.KindConcurrency, Shadow: true}
	share := limiter.Config{Kind: limiter.KindShare}
	granted := limitd.Decision{Granted: true, Permits: 2, Version: 1, Now: 100}
	refused := limitd.Decision{Permits: 2, RetryAfter: 50, Version: 1, Now: 100}
	for _, c := range []struct {
		name       string
		config     *limiter.Config // nil: no such limiter
		shadowAll  bool            // Options.Shadow
		decision   limitd.Decision
		slot       limitd.SlotLease
		permits    int64
		given      Given
		wantRate   *limitd.Decision
		wantSlot   *limitd.SlotLease
		wantErr    error
		wantField  string // the *limiter.FieldError's field
		wantCalls  []Op
		wantEvents []string // outcomes reported
	}{
		{name: "a rate grant", config: &rate, decision: granted, permits: 2,
			wantRate: &granted, wantCalls: []Op{OpAcquire}, wantEvents: []string{"granted"}},
		{name: "a rate refusal", config: &rate, decision: refused, permits: 2,
			wantRate: &refused, wantCalls: []Op{OpAcquire, OpGet}, wantEvents: []string{"denied"}},
		{name: "a refusal in the limiter's shadow mode", config: &shadowRate, decision: refused, permits: 2,
			wantRate:  &limitd.Decision{Granted: true, Shadow: true, Permits: 2, Scheduled: 100, Start: 100, RetryAfter: 50, Version: 1, Now: 100},
			wantCalls: []Op{OpAcquire, OpGet}, wantEvents: []string{"shadow"}},
		{name: "a refusal in the service's shadow mode", config: &rate, shadowAll: true, decision: refused, permits: 2,
			wantRate:  &limitd.Decision{Granted: true, Shadow: true, Permits: 2, Scheduled: 100, Start: 100, RetryAfter: 50, Version: 1, Now: 100},
			wantCalls: []Op{OpAcquire}, wantEvents: []string{"shadow"}},
		{name: "a concurrency limiter's slot", config: &slots, permits: 1, slot: limitd.SlotLease{Granted: true, ID: "l", InUse: 1, Limit: 2},
			wantSlot: &limitd.SlotLease{Granted: true, ID: "l", InUse: 1, Limit: 2}, wantCalls: []Op{OpAcquire, OpGet, OpAcquireSlot}, wantEvents: []string{"granted"}},
		{name: "a full concurrency limiter", config: &slots, permits: 1, slot: limitd.SlotLease{RetryAfter: -5, InUse: 2, Limit: 2},
			wantSlot: &limitd.SlotLease{InUse: 2, Limit: 2}, wantCalls: []Op{OpAcquire, OpGet, OpAcquireSlot, OpGet}, wantEvents: []string{"denied"}},
		{name: "a full concurrency limiter in shadow mode", config: &shadowSlots, permits: 1, slot: limitd.SlotLease{RetryAfter: 7, InUse: 2, Limit: 2},
			wantSlot:  &limitd.SlotLease{Granted: true, Shadow: true, RetryAfter: 7, InUse: 2, Limit: 2},
			wantCalls: []Op{OpAcquire, OpGet, OpAcquireSlot, OpGet}, wantEvents: []string{"shadow"}},
		{name: "a concurrency limiter given permits", config: &slots, permits: 3, given: Given{Permits: true},
			wantField: "permits", wantCalls: []Op{OpAcquire, OpGet}},
		{name: "a share limiter", config: &share, permits: 1, wantErr: limiter.ErrConflict, wantCalls: []Op{OpAcquire, OpGet}},
		{name: "no such limiter", permits: 1, wantErr: limiter.ErrNotFound, wantCalls: []Op{OpAcquire}},
		{name: "no permits", config: &rate, permits: 0, wantField: "permits"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeStore{limiters: map[string]limiter.Config{}, decision: c.decision, slot: c.slot}
			if c.config != nil {
				f.limiters["x"] = *c.config
			}
			rec := &recorder{}
			s := over(f, Options{Observer: rec, Shadow: c.shadowAll})
			got, err := s.Acquire(context.Background(), AcquireRequest{Name: "x", Permits: c.permits, Given: c.given})
			var fe *limiter.FieldError
			switch {
			case c.wantField != "":
				if !errors.As(err, &fe) || fe.Field != c.wantField {
					t.Errorf("error %v, want a field error naming %s", err, c.wantField)
				}
			case c.wantErr != nil:
				if !errors.Is(err, c.wantErr) {
					t.Errorf("error %v, want %v", err, c.wantErr)
				}
			case err != nil:
				t.Fatalf("error %v", err)
			}
			if (got.Rate == nil) != (c.wantRate == nil) || got.Rate != nil && *got.Rate != *c.wantRate {
				t.Errorf("rate decision %+v, want %+v", got.Rate, c.wantRate)
			}
			if (got.Slot == nil) != (c.wantSlot == nil) || got.Slot != nil && *got.Slot != *c.wantSlot {
				t.Errorf("slot %+v, want %+v", got.Slot, c.wantSlot)
			}
			if !slices.Equal(rec.calls, c.wantCalls) {
				t.Errorf("store calls %v, want %v", rec.calls, c.wantCalls)
			}
			var outcomes []string
			for _, e := range rec.events {
				outcomes = append(outcomes, e.Outcome)
			}
			if !slices.Equal(outcomes, c.wantEvents) {
				t.Errorf("outcomes %v, want %v", outcomes, c.wantEvents)
			}
		})
	}
}

// A concurrency limiter seen once is asked for its slot first: one call,
// no acquire of permits tried first.
func TestAcquireSlotHint(t *testing.T) {
	f := &fakeStore{limiters: map[string]limiter.Config{"x": {Kind: limiter.KindConcurrency}}, slot: limitd.SlotLease{Granted: true, ID: "l"}}
	rec := &recorder{}
	s := over(f, Options{Observer: rec})
	for range 2 {
		if a, err := s.Acquire(context.Background(), AcquireRequest{Name: "x", Permits: 1}); err != nil || a.Slot == nil {
			t.Fatalf("acquire: %+v, %v", a, err)
		}
	}
	if want := []Op{OpAcquire, OpGet, OpAcquireSlot, OpAcquireSlot}; !slices.Equal(rec.calls, want) {
		t.Errorf("store calls %v, want %v", rec.calls, want)
	}
}

// A lease the store does not hold is a *NotHeldError naming lease_id when
// the limiter exists, the store's ErrNotFound when it does not.
func TestLeaseNotHeldRules(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		name        string
		exists      bool
		held        bool
		wantNotHeld bool
		wantErr     error
	}{
		{name: "held", exists: true, held: true},
		{name: "not held", exists: true, wantNotHeld: true, wantErr: limiter.ErrNotFound},
		{name: "no such limiter", wantErr: limiter.ErrNotFound},
	} {
		for _, op := range []struct {
			name string
			call func(*Service) error
		}{
			{"renew", func(s *Service) error { _, err := s.RenewSlot(context.Background(), "x", id); return err }},
			{"release", func(s *Service) error { return s.ReleaseSlot(context.Background(), "x", id) }},
		} {
			t.Run(c.name+"/"+op.name, func(t *testing.T) {
				f := &fakeStore{limiters: map[string]limiter.Config{}, held: c.held}
				if c.exists {
					f.limiters["x"] = limiter.Config{Kind: limiter.KindConcurrency}
				}
				err := op.call(over(f, Options{}))
				var nh *NotHeldError
				if got := errors.As(err, &nh); got != c.wantNotHeld || got && nh.Field != "lease_id" {
					t.Errorf("error %v: a *NotHeldError %v, want %v naming lease_id", err, got, c.wantNotHeld)
				}
				if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
					t.Errorf("error %v, want %v", err, c.wantErr)
				}
			})
		}
	}
}

// readyFake answers Ready with ready and counts the probes.
type readyFake struct {
	fakeStore
	ready  error
	probes int
}

func (f *readyFake) Ready(context.Context) error { f.probes++; return f.ready }

// Explain asks Ready for the cause of a lost connection only, and takes
// its answer only when it names a cause.
func TestExplain(t *testing.T) {
	lost := &store.UnavailableError{Condition: "connection lost"}
	refused := &store.UnavailableError{Condition: "connection refused"}
	noauth := &store.UnavailableError{Condition: "NOAUTH"}
	timeout := &store.UnavailableError{Condition: "timeout"}
	for _, c := range []struct {
		name       string
		err, ready error
		want       error
		probes     int
	}{
		{"lost, Ready names NOAUTH", lost, noauth, noauth, 1},
		{"lost, Ready times out", lost, timeout, lost, 1},
		{"lost, Ready answers", lost, nil, lost, 1},
		{"refused: no probe", refused, noauth, refused, 0},
		{"a named cause: no probe", noauth, nil, noauth, 0},
		{"not Redis: no probe", ErrNotFound, noauth, ErrNotFound, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &readyFake{ready: c.ready}
			s := over(f, Options{})
			if got := s.Explain(context.Background(), c.err); got != c.want {
				t.Errorf("Explain(%v) = %v, want %v", c.err, got, c.want)
			}
			if f.probes != c.probes {
				t.Errorf("%d probes, want %d", f.probes, c.probes)
			}
		})
	}
}

// markerStore holds limitd's marker as a flag; during marks runs mark (a
// keeper's Mark landing while the check's answer is on its way).
type markerStore struct {
	fakeStore
	present bool
	during  func()
}

func (m *markerStore) Mark(context.Context, string) error { m.present = true; return nil }

func (m *markerStore) Marked(context.Context) (bool, int64, error) {
	present := m.present
	if m.during != nil {
		m.during()
	}
	return present, 7, nil
}

// A missing marker is one loss however many checks see it before Mark
// writes it again, and a check whose answer left before a Mark that
// succeeded does not tell a loss that Mark ended.
func TestCheckMarkerLosses(t *testing.T) {
	ctx := context.Background()
	m := &markerStore{}
	s := over(m, Options{})
	if pending, err := s.CheckMarker(ctx); pending || err != nil {
		t.Fatalf("before any Mark: pending %v, %v; want false (nothing to lose yet)", pending, err)
	}
	if err := s.Mark(ctx, ""); err != nil {
		t.Fatal(err)
	}
	m.present = false // FLUSHALL
	for range 2 {
		if pending, err := s.CheckMarker(ctx); !pending || err != nil {
			t.Fatalf("marker gone: pending %v, %v; want true", pending, err)
		}
	}
	if at, pending, count := s.DataLoss(); at != 7 || !pending || count != 1 {
		t.Fatalf("after two checks of one loss: at %d, pending %v, count %d; want 7, true, 1", at, pending, count)
	}
	m.during = func() { _ = s.Mark(ctx, "") } // the answer "gone" arrives after Mark
	if pending, err := s.CheckMarker(ctx); pending || err != nil {
		t.Fatalf("a check answered before a Mark that succeeded: pending %v, %v; want false", pending, err)
	}
	if _, pending, count := s.DataLoss(); pending || count != 1 {
		t.Errorf("after Mark: pending %v, count %d; want false, 1 (the stale answer is not a second loss)", pending, count)
	}
	m.during = nil
	m.present = false
	if pending, _ := s.CheckMarker(ctx); !pending {
		t.Error("a second FLUSHALL after Mark: not pending")
	}
	if _, _, count := s.DataLoss(); count != 2 {
		t.Errorf("a second FLUSHALL: count %d, want 2", count)
	}
}
