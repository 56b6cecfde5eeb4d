package client

import (
	"math"
	"testing"
	"time"
)

// A process that takes a steady part of the schedule is measured at that
// part, soon after its first grants and for good.
func TestSchedPartSteady(t *testing.T) {
	for _, f := range []float64{0.05, 1.0 / 3, 0.5, 1} {
		var s schedPart
		const grant = int64(10 * time.Millisecond) // each grant: 10ms of schedule
		end := int64(1e18)
		if s.part() != 0 {
			t.Fatalf("part %v before any grant", s.part())
		}
		for i := range 2000 { // 2000 grants: 20 s of own schedule
			end += int64(float64(grant) / f)
			s.add(end, grant)
			if got := s.part(); i >= 20 && math.Abs(got-f) > 0.05*f {
				t.Fatalf("part %.3f: after %d grants measured %.4f", f, i+1, got)
			}
		}
		if got := s.part(); math.Abs(got-f) > 0.01*f {
			t.Errorf("part %.3f: measured %.4f after 2000 grants", f, got)
		}
	}
}

// Three processes that take a queued schedule in runs, one after the other
// (each takes 64 permits in a row, then the others do): whatever the phase
// at which one looks, the parts they measure add up to 1 within 3 %. (With
// a ratio over two seconds of schedule, the fallbacks of such processes in
// TestFallbackNeverStacks added up to 1.04–1.08× the rate.)
func TestSchedPartRuns(t *testing.T) {
	const slice = int64(10 * time.Millisecond) // 100/s
	const run, grant = 64, 4                   // permits per run, per grant
	var parts [3]schedPart
	end := int64(1e18)
	worst := 0.0
	for cycle := range 40 { // 40 × 1.92 s of schedule
		for p := range parts {
			for range run / grant {
				end += grant * slice
				parts[p].add(end, grant*slice)
				if cycle < 8 {
					continue // the smoothing settles for 15 s of schedule
				}
				sum := 0.0
				for q := range parts {
					sum += parts[q].part()
				}
				worst = max(worst, math.Abs(sum-1))
				if got := parts[p].part(); math.Abs(got-1.0/3) > 0.1/3 {
					t.Fatalf("cycle %d: process %d measures %.4f, want 1/3 within 10%%", cycle, p, got)
				}
			}
		}
	}
	t.Logf("the parts add up to 1 within %.2f%%", 100*worst)
	if worst > 0.03 {
		t.Errorf("the parts add up to 1 only within %.2f%%, want 3%%", 100*worst)
	}
}

// A rewound schedule (a hand-back, a lost state) counts the grant itself as
// the schedule's move: the part stays within [0, 1].
func TestSchedPartRewound(t *testing.T) {
	var s schedPart
	end := int64(1e18)
	for range 100 {
		end += int64(30 * time.Millisecond)
		s.add(end, int64(10*time.Millisecond))
	}
	before := s.part()
	s.add(end-int64(time.Second), int64(10*time.Millisecond))
	if got := s.part(); got < before || got > 1 {
		t.Fatalf("after a rewind: part %.4f (before %.4f)", got, before)
	}
}
