package limiter

import (
	"fmt"
	"math"
	"testing"
)

// TestDoormanWorkedExamples: capacity 120, clients wanting 1000, 50 and 10,
// each asking in turn, twice (the figures of Doorman's algorithm tests).
func TestDoormanWorkedExamples(t *testing.T) {
	for _, tc := range []struct {
		alg  Algorithm
		want [3]float64
	}{
		{AlgorithmProportional, [3]float64{69.69, 40.31, 10}},
		{AlgorithmFair, [3]float64{60, 50, 10}},
		{AlgorithmStatic, [3]float64{40, 40, 10}},
	} {
		t.Run(string(tc.alg), func(t *testing.T) {
			p := ShareParams{Capacity: 120, Algorithm: tc.alg, Lease: 60e9, Refresh: 5e9}
			var s ShareState
			wants := []float64{1000, 50, 10}
			var got [3]float64
			for round := 0; round < 2; round++ {
				for i, w := range wants {
					got[i] = p.Request(&s, int64(round*1e9+i), ShareRequest{Client: fmt.Sprint("c", i), Wants: w}, got[i]).Gets
				}
			}
			for i := range got {
				if math.Abs(got[i]-tc.want[i]) > 0.005 {
					t.Errorf("client %d gets %.4f, want %.2f (all: %.2f)", i, got[i], tc.want[i], got)
				}
			}
			if sum := got[0] + got[1] + got[2]; sum > 120+1e-9 {
				t.Errorf("Σ gets = %v > capacity 120", sum)
			}
		})
	}
}

func TestShareNeverOvershoots(t *testing.T) {
	p := ShareParams{Capacity: 100, Algorithm: AlgorithmFair, Lease: 10e9, Refresh: 1e9}
	var s ShareState
	// The first client takes everything while alone; a newcomer gets only what
	// is unassigned until the first refreshes and gives some up.
	if g := p.Request(&s, 0, ShareRequest{Client: "a", Wants: 200}, 0).Gets; g != 100 {
		t.Fatalf("a gets %v, want 100", g)
	}
	if g := p.Request(&s, 1, ShareRequest{Client: "b", Wants: 200}, 0).Gets; g != 0 {
		t.Fatalf("b gets %v while a holds everything, want 0", g)
	}
	if g := p.Request(&s, 2, ShareRequest{Client: "a", Wants: 200}, 100).Gets; g != 50 {
		t.Fatalf("a refreshes to %v, want its fair 50", g)
	}
	if g := p.Request(&s, 3, ShareRequest{Client: "b", Wants: 200}, 0).Gets; g != 50 {
		t.Fatalf("b gets %v after a refreshed, want 50", g)
	}
	// a's lease expires: its capacity is free again.
	if g := p.Request(&s, 10e9+3, ShareRequest{Client: "b", Wants: 200}, 50).Gets; g != 100 {
		t.Fatalf("b gets %v after a's lease expired, want 100", g)
	}
}

func TestShareLearningMode(t *testing.T) {
	p := ShareParams{Capacity: 100, Algorithm: AlgorithmFair, Lease: 10e9, Refresh: 1e9, Learning: 10e9}
	var s ShareState // the state was lost: clients still hold 60 and 40
	l := p.Request(&s, 0, ShareRequest{Client: "a", Wants: 100}, 60)
	if !l.Learning || l.Gets != 60 {
		t.Fatalf("a in learning gets %+v, want its 60 back", l)
	}
	if g := p.Request(&s, 1, ShareRequest{Client: "new", Wants: 100}, 0).Gets; g != 0 {
		t.Fatalf("a new client in learning gets %v, want 0", g)
	}
	if g := p.Request(&s, 2, ShareRequest{Client: "b", Wants: 100}, 40).Gets; g != 40 {
		t.Fatalf("b in learning gets %v, want its 40 back", g)
	}
	l = p.Request(&s, 10e9, ShareRequest{Client: "a", Wants: 100}, 60)
	if l.Learning {
		t.Fatalf("still learning after the learning period: %+v", l)
	}
}
