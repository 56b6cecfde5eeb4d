package limiter

import (
	"errors"
	"testing"
	"time"
)

// TestMaxReserve: one request may take at most max_reserve of schedule
// (default 1m), never less than one permit.
func TestMaxReserve(t *testing.T) {
	cases := []struct {
		c    Config
		want int64
	}{
		{Config{Rate: 100}, 6000},
		{Config{Rate: 100, MaxReserve: D(10 * time.Second)}, 1000},
		{Config{Rate: 3, MaxReserve: D(time.Second)}, 3},
		{Config{Rate: 1.0 / 3600}, 1},                          // one permit costs an hour: still one
		{Config{Rate: 10, MaxReserve: D(time.Millisecond)}, 1}, // below one permit's cost: one
		{Config{Kind: KindSmooth, Rate: 100}, 6000},
		{Config{Rate: 1e9, MaxReserve: D(time.Duration(Horizon))}, SliceOf(1e9).MaxPermits()},
	}
	for _, tc := range cases {
		p := engCompile(t, tc.c)
		if p.MaxPermits != tc.want {
			t.Errorf("%+v: MaxPermits %d, want %d", tc.c, p.MaxPermits, tc.want)
		}
		var s State
		if _, err := p.Acquire(&s, 1, p.MaxPermits+1, Forever); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %d permits: err %v, want ErrInvalid", tc.c, p.MaxPermits+1, err)
		}
		if r, err := p.Acquire(&s, 1, p.MaxPermits, Forever); err != nil || !r.Granted {
			t.Errorf("%+v: %d permits: %+v, %v", tc.c, p.MaxPermits, r, err)
		}
	}
	// The case: 112,000,000 permits of a 100/s limiter (13 days).
	p := engCompile(t, Config{Rate: 100})
	var s State
	_, err := p.Acquire(&s, 1, 112_000_000, Forever)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "permits" {
		t.Errorf("112e6 permits: %v, want a FieldError naming permits", err)
	}
	for _, bad := range []Config{
		{Rate: 1, MaxReserve: D(0)},
		{Rate: 1, MaxReserve: D(-time.Second)},
		{Rate: 1, MaxReserve: D(time.Duration(Horizon + 1))},
		{Kind: KindShare, Capacity: ptr(1.0), MaxReserve: D(time.Second)},
	} {
		if _, _, err := bad.Normalize(); !errors.As(err, &fe) || fe.Field != "max_reserve" {
			t.Errorf("%+v: %v, want a FieldError naming max_reserve", bad, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// clockTwins drives two states of one limiter through the same calls, one on
// a clock that steps back by step at the call `at`, the other on a clock
// that does not: every result of the stepped one is the other's, step
// earlier (the schedule continues; nobody waits out the step; nothing more
// is granted).
func clockTwins(t *testing.T, c Config, step int64) {
	t.Helper()
	p := engCompile(t, c)
	var a, b State // a: stepped clock, b: steady clock
	now := int64(1e18)
	sl := p.Slice.Whole
	shift := int64(0)
	for i := range 400 {
		if i == 150 {
			// A grant just before the step: the state knows the time it saw
			// (Last), and a step back from there is one it tells. (A step
			// smaller than the time since its last grant goes unseen and costs
			// a caller at most that step: see Observe.)
			ra, rb := engAcquire(t, &p, &a, now, 1, Forever), engAcquire(t, &p, &b, now, 1, Forever)
			if ra != rb {
				t.Fatalf("call %d: %+v, %+v", i, ra, rb)
			}
			shift = step
		}
		n := int64(1 + i%3)
		mw := []int64{0, sl / 2, 2 * sl, Forever}[i%4]
		ra := engAcquire(t, &p, &a, now-shift, n, mw)
		rb := engAcquire(t, &p, &b, now, n, mw)
		if ra.Granted {
			ra.Scheduled += shift
			ra.Start += shift
		}
		if ra != rb {
			t.Fatalf("%+v step %d, call %d: stepped %+v, steady %+v", c, step, i, ra, rb)
		}
		if i%10 == 0 {
			va, vb := p.Peek(a, now-shift), p.Peek(b, now)
			va.Next += shift
			if va != vb {
				t.Fatalf("call %d: peek stepped %+v, steady %+v", i, va, vb)
			}
		}
		now += []int64{0, sl / 3, sl, 3 * sl, 17 * sl / 10}[i%5]
	}
}

// TestClockStepBack: Redis time stepping back (a failover to a host whose
// clock is behind) neither stalls a limiter for the step nor grants more.
func TestClockStepBack(t *testing.T) {
	for _, c := range []Config{
		{Rate: 100, Burst: B(1)},
		{Rate: 1000, Burst: B(1.1), MaxBacklog: D(time.Second)},
		{Rate: 3, Burst: B(Inf)},
		{Kind: KindSmooth, Rate: 100},
		{Kind: KindSmooth, Rate: 50, Warmup: D(2 * time.Second)},
	} {
		for _, step := range []int64{1, int64(time.Millisecond), int64(60 * time.Second), int64(time.Hour)} {
			clockTwins(t, c, step)
		}
	}
	// The case: a 60 s step back stalled every limiter 60 s.
	p := engCompile(t, Config{Rate: 100, Burst: B(1)})
	var s State
	now := int64(1e18)
	engAcquire(t, &p, &s, now, 1, 0)
	now += 5 * engMs
	// The state's time stands where it last granted (5 ms before the step):
	// the caller waits what the schedule owed then, one slice, not 60 s.
	if r := engAcquire(t, &p, &s, now-60*engSec, 1, 0); r.Granted || r.Delay != 10*engMs {
		t.Errorf("after a 60 s step back: %+v, want a delay of the 10 ms owed at the last grant", r)
	}
}

// TestClockStepForward: a forward step looks like idle time: the backlog
// grows up to max_backlog (then is forfeited), a smooth limiter stores
// permits up to its burst.
func TestClockStepForward(t *testing.T) {
	p := engCompile(t, Config{Rate: 100, Burst: B(2), MaxBacklog: D(time.Second)})
	var s State
	now := int64(1e18)
	engAcquire(t, &p, &s, now, 1, 0)
	now += time.Hour.Nanoseconds()
	if v := p.Peek(s, now); v.Wait != engSec {
		t.Errorf("backlog after an hour's step: %d, want max_backlog 1s", v.Wait)
	}
	if v := p.Peek(s, now); v.Idle != time.Hour.Nanoseconds()-engSec-10*engMs {
		t.Errorf("idle after an hour's step: %d, want the hour less max_backlog and the slice granted", v.Idle)
	}
	q := engCompile(t, Config{Kind: KindSmooth, Rate: 100, MaxBurstSeconds: ptr(2.0)})
	var u State
	q.Start(&u, now)
	now += time.Hour.Nanoseconds()
	if v := q.Peek(u, now); v.Wait != 2*engSec {
		t.Errorf("smooth stored after an hour's step: %d, want its burst 2s", v.Wait)
	}
}

// TestFloor: a state that came back older or fresh never starts a permit
// before the floor its callers carry.
func TestFloor(t *testing.T) {
	for _, c := range []Config{{Rate: 100, Burst: B(1.1)}, {Kind: KindSmooth, Rate: 100, MaxBurstSeconds: ptr(1.0)}} {
		p := engCompile(t, c)
		var s State
		now := int64(1e18)
		p.Start(&s, now)
		old := s
		var pos, seen int64
		for range 50 { // 50 permits at once: the schedule runs 0.5 s ahead
			engAcquire(t, &p, &s, now, 1, Forever)
			pos, seen = s.Next, now
		}
		f := Floor{Seen: seen, Ahead: pos - seen}
		for _, st := range []struct {
			name string
			s    State
		}{{"older copy", old}, {"fresh", State{}}} {
			s := st.s
			at := now + 10*engMs
			p.ApplyFloor(&s, at, f)
			r := engAcquire(t, &p, &s, at, 1, Forever)
			if r.Start < pos || r.Scheduled < pos {
				t.Errorf("%s %s: granted at %d (scheduled %d), before the floor %d", c.Kind, st.name, r.Start, r.Scheduled, pos)
			}
			// A floor already passed changes nothing.
			u := s
			p.ApplyFloor(&u, at, f)
			if u != s {
				t.Errorf("%s %s: a floor behind the schedule changed it", c.Kind, st.name)
			}
		}
		// After a clock step back (Seen ahead of now) the floor is re-anchored
		// at now: it holds the schedule as far ahead of now as it was seen,
		// not the length of the step.
		s2 := State{}
		back := now - 60*engSec
		p.ApplyFloor(&s2, back, f)
		r := engAcquire(t, &p, &s2, back, 1, Forever)
		if r.Start != back+f.Ahead {
			t.Errorf("%s re-anchored: start %d, want now + %d", c.Kind, r.Start-back, f.Ahead)
		}
		// Too old a floor counts for nothing.
		s3 := State{}
		late := seen + FloorAge
		p.ApplyFloor(&s3, late, f)
		if s3.Next != late {
			t.Errorf("%s: a floor older than FloorAge moved the schedule to %d", c.Kind, s3.Next-late)
		}
	}
}

// TestFloorBornAfter: a floor whose position the clock has passed still
// holds a state that started after it was seen (the schedule it saw is
// gone) as far ahead of now as its Ahead, while it is younger than twice
// its Ahead; an older one, a state that was there when it was seen, and a
// window change nothing.
func TestFloorBornAfter(t *testing.T) {
	p := engCompile(t, Config{Rate: 50, Burst: B(1)})
	seen := int64(1e18)
	f := Floor{Seen: seen, Ahead: 3 * engSec} // the schedule stood 3 s ahead
	now := seen + 4*engSec                    // its position passed 1 s ago
	var s State
	p.ApplyFloor(&s, now, f)
	if s.Next != now+f.Ahead {
		t.Errorf("fresh state: next now%+d, want now + the floor's Ahead %d", s.Next-now, f.Ahead)
	}
	if r := engAcquire(t, &p, &s, now, 1, Forever); r.Scheduled != now+f.Ahead {
		t.Errorf("fresh state: scheduled now%+d, want now%+d", r.Scheduled-now, f.Ahead)
	}
	// Started before now but after the floor (by a caller without one).
	var u State
	p.Start(&u, seen+engSec)
	p.ApplyFloor(&u, now, f)
	if u.Next != now+f.Ahead {
		t.Errorf("state started after the floor: next now%+d, want now%+d", u.Next-now, f.Ahead)
	}
	// Twice its Ahead after it was seen: nothing.
	var o State
	late := seen + 2*f.Ahead
	p.ApplyFloor(&o, late, f)
	if o.Next != late {
		t.Errorf("a floor seen twice its Ahead ago moved a fresh state to now%+d", o.Next-late)
	}
	// A state that started before the floor was seen, and stands beyond its
	// position, lost nothing of it.
	var w State
	for range 225 { // 4.5 s at 50/s: next at seen + 3.5 s
		engAcquire(t, &p, &w, seen-engSec, 1, Forever)
	}
	before := w
	before.Observe(now)
	p.ApplyFloor(&w, now, f)
	if w.Next != before.Next {
		t.Errorf("a state older than the floor moved from %d to %d", before.Next, w.Next)
	}
	// A clock stepped back behind the state's Origin: the floors seen since
	// are on the new clock, earlier than Origin, and tell nothing of it.
	var b State
	for range 250 { // 5 s at 50/s from seen + 1 s
		engAcquire(t, &p, &b, seen+engSec, 1, Forever)
	}
	b.Observe(seen - engSec) // 2 s back: next at seen + 4 s, Last before Origin
	stepped := b
	stepped.Observe(seen)
	p.ApplyFloor(&b, seen, Floor{Seen: seen - engSec/2, Ahead: 4400 * engMs}) // its position seen + 3.9 s
	if b.Next != stepped.Next {
		t.Errorf("after a step back behind Origin, a floor behind next moved it from %d to %d", stepped.Next, b.Next)
	}
	// A window: the window the floor saw is over.
	limit := int64(50)
	q := engCompile(t, Config{Kind: KindWindow, Limit: &limit, Period: "1s"})
	var x State
	q.ApplyFloor(&x, now, Floor{Seen: seen, Ahead: 3 * engSec})
	if x.Next > now+engSec || x.Stored == windowFull {
		t.Errorf("window: a passed floor marked the new window full (next now%+d, stored %d)", x.Next-now, x.Stored)
	}
}
