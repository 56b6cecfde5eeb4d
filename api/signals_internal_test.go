package api

import (
	"testing"
	"time"
	"unsafe"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
)

// A limiter's history keeps its last historyLen samples, oldest first, in
// memory that stops growing at historyLen.
func TestHistoryRingBound(t *testing.T) {
	var s series
	const n = historyLen + 250
	for i := range n {
		s.keep(sample{t: int64(i)})
	}
	if len(s.samples) != historyLen || cap(s.samples) > 2*historyLen {
		t.Fatalf("%d samples kept (capacity %d), want %d", len(s.samples), cap(s.samples), historyLen)
	}
	h := s.history()
	if len(h) != historyLen || h[0].T != n-historyLen || h[len(h)-1].T != n-1 {
		t.Errorf("history %d..%d (%d), want %d..%d", h[0].T, h[len(h)-1].T, len(h), n-historyLen, n-1)
	}
	for i := 1; i < len(h); i++ {
		if h[i].T != h[i-1].T+1 {
			t.Fatalf("history out of order at %d: %d after %d", i, h[i].T, h[i-1].T)
		}
	}
	if last, ok := s.last(); !ok || last.t != n-1 {
		t.Errorf("last %+v, want the newest", last)
	}
}

// Totals that go back (the limiter created again, Redis emptied) start the
// rates over rather than read as a negative rate.
func TestSignalsTotalsGoBack(t *testing.T) {
	rate := func(permits, now int64) core.Limiter {
		return core.Limiter{Info: core.Info{Config: limiter.Config{Kind: limiter.KindSchedule, Rate: 100}},
			State: &core.WaitInfo{Permits: permits, Now: now, Started: true}}
	}
	var s series
	sec := int64(time.Second)
	s.signal(rate(0, 0), 0)
	if sm := s.signal(rate(50, sec), sec); sm.granted != 50 || sm.use != 0.5 {
		t.Errorf("50 permits in 1 s: %+v", sm)
	}
	if sm := s.signal(rate(3, 2*sec), 2*sec); sm.granted != 0 || sm.use != 0 {
		t.Errorf("totals went back: %+v, want no rate", sm)
	}
	if sm := s.signal(rate(13, 3*sec), 3*sec); sm.granted != 10 || sm.use != 0.1 {
		t.Errorf("10 permits in the second after: %+v, want 10/s from the new start", sm)
	}
	// The utilization spans utilizationSpan samples at most.
	for i := int64(4); i < 30; i++ {
		s.signal(rate(13+(i-3)*20, i*sec), i*sec)
	}
	if sm, _ := s.last(); sm.granted != 0 { // signal does not keep
		t.Errorf("signal kept a sample: %+v", sm)
	}
	if sm := s.signal(rate(13+26*20+200, 30*sec), 30*sec); sm.granted != 200 ||
		sm.use != float32(9*20+200)/float32(utilizationSpan)/100 {
		t.Errorf("utilization %v, want the last %d s' rate over the configured one", sm.use, utilizationSpan)
	}
}

// Calls and refusals come from the decision totals in Redis: a refusal
// makes the limiter saturated whatever its utilization.
func TestSignalsRefused(t *testing.T) {
	win := func(tot core.Totals, now int64) core.Limiter {
		return core.Limiter{Info: core.Info{Config: limiter.Config{Kind: limiter.KindWindow}}, Totals: &tot,
			State: &core.WaitInfo{Window: true, Limit: 100, Wait: 90, Started: true, Now: now, Position: now + int64(time.Minute)}}
	}
	var s series
	sec := int64(time.Second)
	s.signal(win(core.Totals{GrantedCalls: 4, GrantedPermits: 8}, 0), 0)
	sm := s.signal(win(core.Totals{GrantedCalls: 5, GrantedPermits: 10, RefusedCalls: 2, RefusedPermits: 6}, 2*sec), 2*sec)
	if sm.grantedCalls != 0.5 || sm.granted != 1 || sm.refusedCalls != 1 || sm.refused != 3 {
		t.Errorf("rates %+v, want over the 2 s between the samples", sm)
	}
	if sm.use != 0.1 || sm.wait != 0 || !sm.saturated {
		t.Errorf("%+v: want utilization 0.1, no wait, saturated (callers refused)", sm)
	}
}

// What the history costs, as its doc and the README count it: 40 bytes a
// sample, so 900 of them about 36 KiB.
func TestSampleSize(t *testing.T) {
	if n := unsafe.Sizeof(sample{}); n != 40 {
		t.Errorf("a sample is %d bytes; the README and historyLen's doc say 40", n)
	}
}

// Once a limiter's totals in Redis counted something they alone count: when
// they expire (a long idle) the state's count of granted permits does not
// come back as a burst of grants.
func TestSignalsTotalsExpire(t *testing.T) {
	l := func(tot core.Totals, permits, now int64) core.Limiter {
		return core.Limiter{Info: core.Info{Config: limiter.Config{Kind: limiter.KindSchedule, Rate: 1000}}, Totals: &tot,
			State: &core.WaitInfo{Permits: permits, Now: now, Started: true}}
	}
	var s series
	sec := int64(time.Second)
	s.signal(l(core.Totals{}, 900, 0), 0) // no totals yet: the state's count
	if sm := s.signal(l(core.Totals{}, 1000, sec), sec); sm.granted != 100 {
		t.Errorf("from the state: %+v, want 100/s", sm)
	}
	s.signal(l(core.Totals{GrantedPermits: 10, GrantedCalls: 10}, 1010, 2*sec), 2*sec)
	if sm := s.signal(l(core.Totals{GrantedPermits: 30, GrantedCalls: 20}, 1030, 3*sec), 3*sec); sm.granted != 20 || sm.grantedCalls != 10 {
		t.Errorf("from the totals: %+v, want 20 permits/s, 10 calls/s", sm)
	}
	if sm := s.signal(l(core.Totals{}, 1030, 4*sec), 4*sec); sm.granted != 0 {
		t.Errorf("totals expired: %+v, want nothing granted", sm)
	}
	if sm := s.signal(l(core.Totals{GrantedPermits: 5, GrantedCalls: 5}, 1035, 5*sec), 5*sec); sm.granted != 5 {
		t.Errorf("counting again: %+v, want 5/s", sm)
	}
}

// A rate limiter used below its rate has its next permit up to one interval
// ahead right after a grant: that pacing is no queue, and not saturated. A
// wait beyond two intervals is callers queueing; a full window's wait is.
func TestSaturatedByWait(t *testing.T) {
	sec := int64(time.Second)
	sched := func(tot core.Totals, now, delay int64) core.Limiter {
		return core.Limiter{Info: core.Info{Config: limiter.Config{Kind: limiter.KindSchedule, Rate: 50}}, Totals: &tot,
			State: &core.WaitInfo{Started: true, Now: now, Delay: delay}}
	}
	for _, c := range []struct {
		delay     int64
		saturated bool
	}{
		{0, false},
		{20 * int64(time.Millisecond), false}, // one interval at 50/s: pacing
		{39 * int64(time.Millisecond), false},
		{41 * int64(time.Millisecond), true}, // beyond two intervals: a queue
		{3 * sec, true},
	} {
		var s series
		s.signal(sched(core.Totals{GrantedCalls: 0, GrantedPermits: 0}, 0, 0), 0)
		sm := s.signal(sched(core.Totals{GrantedCalls: 40, GrantedPermits: 40}, sec, c.delay), sec) // 80 % of the rate
		if sm.saturated != c.saturated || sm.wait != c.delay {
			t.Errorf("delay %v at 80 %% use: saturated %v (wait %v), want %v", time.Duration(c.delay), sm.saturated, time.Duration(sm.wait), c.saturated)
		}
	}
	win := core.Limiter{Info: core.Info{Config: limiter.Config{Kind: limiter.KindWindow}},
		State: &core.WaitInfo{Window: true, Limit: 10, Wait: 0, Started: true, Now: 0, Position: sec}}
	var s series
	if sm := s.signal(win, 0); !sm.saturated || sm.wait != sec {
		t.Errorf("a full window: %+v, want saturated with a wait of 1 s", sm)
	}
}
