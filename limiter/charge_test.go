package limiter

import (
	"errors"
	"testing"
)

func chargeOf(t *testing.T, p *Params, s *State, now, n, maxWait int64) Result {
	t.Helper()
	r, err := p.Charge(s, now, n, maxWait)
	if err != nil {
		t.Fatalf("charge %d at %d: %v", n, now, err)
	}
	return r
}

// A schedule's charge advances its allocated time by n slices whatever its
// debt: later callers wait until it is paid, and a check says so.
func TestChargeSchedule(t *testing.T) {
	p, err := Compile(Config{Rate: 10, Burst: B(1)}) // a slice of 100 ms
	if err != nil {
		t.Fatal(err)
	}
	const t0 = int64(1_700_000_000e9)
	var s State
	r := chargeOf(t, &p, &s, t0, 30, 0)
	want := Result{Granted: true, Permits: 30, Scheduled: t0, Start: t0, Delay: 3e9}
	if r != want {
		t.Fatalf("charge 30: %+v, want %+v", r, want)
	}
	if s.Next != t0+3e9 || s.Allocated != 3e9 || s.Permits != 30 {
		t.Fatalf("after charging 30: %+v", s)
	}
	before := s
	if r := chargeOf(t, &p, &s, t0, 0, 0); r.Granted || r.Permits != 0 || r.Delay != 3e9 {
		t.Errorf("check in debt, max wait 0: %+v, want not granted, delay 3 s", r)
	}
	if r := chargeOf(t, &p, &s, t0, 0, 3e9); !r.Granted {
		t.Errorf("check in debt, max wait 3 s: %+v, want granted", r)
	}
	if s != before {
		t.Fatalf("a check changed the state: %+v, was %+v", s, before)
	}
	if r, _ := p.Acquire(&s, t0+1e9, 1, 0); r.Granted || r.RetryAfter != 2e9 {
		t.Errorf("acquire 1 s later: %+v, want refused for 2 s", r)
	}
	// A charge in debt is taken all the same; it would not have fitted.
	r = chargeOf(t, &p, &s, t0+1e9, 10, 0)
	want = Result{Permits: 10, Scheduled: t0 + 3e9, Start: t0 + 3e9, Delay: 3e9}
	if r != want {
		t.Fatalf("charge 10 in debt: %+v, want %+v", r, want)
	}
	if r, _ := p.Acquire(&s, t0+1e9, 1, Forever); !r.Granted || r.Start != t0+4e9 {
		t.Errorf("acquire after the charges: %+v, want a start at t0 + 4 s", r)
	}
	if s.Next != s.Origin+s.Allocated+s.Idle {
		t.Errorf("next %d ≠ origin + allocated + idle: %+v", s.Next, s)
	}
}

// A smooth limiter's charge spends its stored permits and owes the rest, as
// Guava's reserve does.
func TestChargeSmooth(t *testing.T) {
	p, err := Compile(Config{Kind: KindSmooth, Rate: 5, MaxBurstSeconds: engF(1)}) // 200 ms a permit
	if err != nil {
		t.Fatal(err)
	}
	const t0 = int64(1_700_000_000e9)
	var s State
	p.Start(&s, t0)
	now := t0 + 1e9 // 5 permits stored
	r := chargeOf(t, &p, &s, now, 8, 0)
	if !r.Granted || r.Start != now || r.Delay != 600e6 || r.Wait != 0 {
		t.Fatalf("charge 8 with 5 stored: %+v, want granted, 600 ms owed", r)
	}
	r = chargeOf(t, &p, &s, now, 5, 0)
	if r.Granted || r.Start != now+600e6 || r.Delay != 1600e6 {
		t.Fatalf("charge 5 in debt: %+v, want not within, 1.6 s owed", r)
	}
	if r, _ := p.Acquire(&s, now, 1, Forever); r.Start != now+1600e6 {
		t.Errorf("acquire after the charges: %+v", r)
	}
}

// A window counts a charge past its limit: a check answers "over" until the
// window resets. Four requests of 300 checked before their work fit a
// budget of 1,000 a minute; one of 1,500 uses the minute up alone.
func TestChargeWindow(t *testing.T) {
	p := windowParamsOf(t, Config{Limit: limitOf(1000), Period: "1m"})
	base := int64(1_700_000_040) * 1e9 // a whole minute
	var s State
	admitted := 0
	for i := range 6 {
		now := base + int64(i+1)*1e9
		if !chargeOf(t, &p, &s, now, 0, 0).Granted { // the check
			continue
		}
		admitted++
		r := chargeOf(t, &p, &s, now, 300, 0)
		if r.Granted != (admitted <= 3) || r.Permits != 300 || r.Start != now {
			t.Errorf("charge %d: %+v", admitted, r)
		}
		if left := max(0, 1000-300*int64(admitted)); r.Wait != left {
			t.Errorf("charge %d: %d left, want %d", admitted, r.Wait, left)
		}
		if admitted == 4 && r.Delay != base+60e9-now {
			t.Errorf("over the limit: delay %d, want until the window's end", r.Delay)
		}
	}
	if admitted != 4 || s.Stored != 1200 {
		t.Fatalf("admitted %d, count %d; want 4 and 1200", admitted, s.Stored)
	}
	if r, _ := p.Acquire(&s, base+59e9, 1, Forever); r.Granted || r.RetryAfter != 1e9 {
		t.Errorf("acquire over the limit: %+v, want refused until the window's end", r)
	}
	if r := chargeOf(t, &p, &s, base+60e9, 0, 0); !r.Granted || r.Wait != 1000 {
		t.Errorf("check in the next window: %+v", r)
	}
	if r := chargeOf(t, &p, &s, base+61e9, 1500, 0); r.Granted || r.Wait != 0 {
		t.Errorf("charge 1,500: %+v, want counted, not within", r)
	}
	if r := chargeOf(t, &p, &s, base+62e9, 0, Forever); r.Granted {
		t.Errorf("check after 1,500: %+v, want over whatever the max wait", r)
	}
}

// A sliding window carries at most a full window of a charged count into
// the next one, and tells exactly when it has room again.
func TestChargeWindowSliding(t *testing.T) {
	p := windowParamsOf(t, Config{Limit: limitOf(1000), Period: "1m", Sliding: true})
	base := int64(1_700_000_040) * 1e9
	var s State
	chargeOf(t, &p, &s, base+1e9, 1500, 0)
	r, _ := p.Acquire(&s, base+2e9, 1, 0)
	if r.Granted || r.RetryAfter != base+60e9+1000-(base+2e9) {
		t.Fatalf("acquire after 1,500: %+v, want a retry 1 µs into the next window", r)
	}
	if r, _ := p.Acquire(&s, base+60e9+1000, 1, 0); !r.Granted {
		t.Errorf("at the retry: %+v", r)
	}
	s = State{}
	chargeOf(t, &p, &s, base+1e9, 1500, 0)
	if r, _ := p.Acquire(&s, base+90e9, 500, 0); !r.Granted { // the previous window weighs 1,000 / 2
		t.Errorf("half way into the next window: %+v", r)
	}
	if r, _ := p.Acquire(&s, base+90e9, 1, 0); r.Granted {
		t.Errorf("past the limit half way into the next window: %+v", r)
	}
}

// A window of limit 0 refuses every permit, until its window's end, and
// still counts charges.
func TestWindowLimitZero(t *testing.T) {
	base := int64(1_700_000_040) * 1e9
	for _, sliding := range []bool{false, true} {
		p := windowParamsOf(t, Config{Limit: limitOf(0), Period: "1m", Sliding: sliding})
		var s State
		r, err := p.Acquire(&s, base+10e9, 1, Forever)
		if err != nil || r.Granted || r.RetryAfter != 50e9 {
			t.Errorf("sliding %v: acquire 1: %+v %v, want refused until the window's end", sliding, r, err)
		}
		if _, err := p.Acquire(&s, base+10e9, 2, Forever); !errors.Is(err, ErrInvalid) {
			t.Errorf("sliding %v: acquire 2: %v, want out of range", sliding, err)
		}
		if r := chargeOf(t, &p, &s, base+10e9, 5, 0); r.Granted || s.Stored != 5 || r.Delay != 50e9 {
			t.Errorf("sliding %v: charge 5: %+v, count %d", sliding, r, s.Stored)
		}
		if v := p.Peek(s, base+70e9); v.Wait != 0 || v.Delay != 50e9 {
			t.Errorf("sliding %v: in the next window: %+v, want refused until its end", sliding, v)
		}
	}
}

// Charges are bounded by the horizon, not by max_reserve; negative ones are
// refused, naming permits.
func TestChargeBounds(t *testing.T) {
	p, err := Compile(Config{Rate: 1, MaxReserve: D(1e9)}) // one permit per acquire at most
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxPermits != 1 || p.MaxCharge() != Horizon/1e9 {
		t.Fatalf("max permits %d, max charge %d", p.MaxPermits, p.MaxCharge())
	}
	var s State
	for _, n := range []int64{-1, p.MaxCharge() + 1} {
		_, err := p.Charge(&s, 0, n, 0)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "permits" || s != (State{}) {
			t.Errorf("charge %d: %v, state %+v; want a permits error and no change", n, err, s)
		}
	}
	// Three charges of the most: the schedule stops MaxAhead ahead of now,
	// and the permits are all counted.
	const t0 = int64(1_700_000_000e9)
	for range 3 {
		chargeOf(t, &p, &s, t0, p.MaxCharge(), 0)
	}
	if s.Next != t0+MaxAhead || s.Pace != t0+MaxAhead || s.Permits != 3*p.MaxCharge() {
		t.Errorf("after three charges of the most: %+v, want next and pace at now + MaxAhead", s)
	}
	if s.Next != s.Origin+s.Allocated+s.Idle {
		t.Errorf("next %d ≠ origin + allocated + idle: %+v", s.Next, s)
	}
	if r, _ := p.Acquire(&s, t0, 1, Forever); r.Granted || r.RetryAfter != MaxAhead-Horizon {
		t.Errorf("acquire 2·Horizon in debt: %+v, want refused", r)
	}

	w := windowParamsOf(t, Config{Limit: limitOf(1), Period: "1m"})
	var ws State
	if w.MaxCharge() != Horizon {
		t.Fatalf("a window's max charge %d, want %d", w.MaxCharge(), Horizon)
	}
	for range 5 {
		chargeOf(t, &w, &ws, t0, w.MaxCharge(), 0)
	}
	if ws.Stored != MaxWindowCount || ws.Permits != 5*Horizon {
		t.Errorf("window after 5 charges of 2^50: count %d, permits %d", ws.Stored, ws.Permits)
	}
}

// A check (a charge of 0) starts the limiter and lets time pass on it, as a
// refused acquire does, and takes nothing.
func TestChargeCheckTakesNothing(t *testing.T) {
	p, err := Compile(Config{Rate: 10, MaxBacklog: D(1e9)})
	if err != nil {
		t.Fatal(err)
	}
	const t0 = int64(1_700_000_000e9)
	var s, want State
	p.Start(&want, t0)
	if r := chargeOf(t, &p, &s, t0, 0, 0); !r.Granted || s != want {
		t.Fatalf("check of a new limiter: %+v, state %+v, want %+v", r, s, want)
	}
	// a minute later: the backlog beyond max_backlog is forfeited, as a
	// refused acquire would
	want.Next, want.Idle = t0+59e9, 59e9
	if r := chargeOf(t, &p, &s, t0+60e9, 0, 0); !r.Granted || r.Wait != 1e9 || s != want {
		t.Errorf("check a minute later: %+v, state %+v, want %+v", r, s, want)
	}
}

// A window gives a hand-back back to its count within the grant's window,
// never below 0; once the window moved on, the count stays.
func TestWindowRelease(t *testing.T) {
	p := windowParamsOf(t, Config{Limit: limitOf(10), Period: "1m"})
	base := int64(1_700_000_040) * 1e9
	var s State
	grant := func(now, n int64) Handback {
		t.Helper()
		rem := s.Rem
		r, err := p.Acquire(&s, now, n, 0)
		if err != nil || !r.Granted {
			t.Fatalf("acquire %d: %+v %v", n, r, err)
		}
		return p.HandbackOf(r, rem, s.Next, n, n-1) // all but one back
	}
	h := grant(base+1e9, 4)
	if !p.Release(&s, h, true) || s.Stored != 1 || s.Permits != 1 {
		t.Errorf("hand-back of 3 of 4: count %d, permits %d", s.Stored, s.Permits)
	}
	h = grant(base+2e9, 8)
	p.Reset(&s, base+3e9)
	if !p.Release(&s, h, false) || s.Stored != 0 {
		t.Errorf("hand-back after a reset: count %d, want 0", s.Stored)
	}
	h = grant(base+4e9, 5)
	grant(base+61e9, 2) // the next window
	if p.Release(&s, h, true) || s.Stored != 2 {
		t.Errorf("hand-back once the window moved on: count %d, want 2", s.Stored)
	}
}
