package clockoffset

import "testing"

func TestKeepsTheShortestRoundTrip(t *testing.T) {
	var e Estimator
	if got := e.Sample(1000+50, 0, 100); got != 1000 { // rtt 100: offset 1000
		t.Fatalf("first sample: offset %d, want 1000", got)
	}
	if got := e.Sample(5000+500, 4000, 5000); got != 1000 {
		t.Errorf("offset %d after a slower sample, want 1000", got)
	}
	if got := e.Sample(9000+10, 8000, 8020); got != 1000 {
		t.Errorf("offset %d, want 1000", got)
	}
	if got := e.Sample(20000+5, 19000, 19010); got != 1000 { // a faster one: its own
		t.Errorf("offset %d after a faster sample, want 1000", got)
	}
}

// The best sample is kept only within what the current round trip allows:
// Redis read its clock between t0 and t1, so the offset lies in
// [redisNow − t1, redisNow − t0].
func TestClampsToTheCurrentRoundTrip(t *testing.T) {
	var e Estimator
	e.Sample(1000+5, 0, 10) // rtt 10: offset 1000
	// The Redis clock jumped back 600 ns: a slow round trip with offset 400
	// ± 250. The old best (1000) is outside what this trip allows.
	if got := e.Sample(5000+400+250, 5000, 5500); got != 5650-5000 {
		t.Errorf("offset %d, want it clamped to redisNow − t0 = %d", got, 5650-5000)
	}
	if got := e.Sample(8000+1000+2000, 8000, 9000); got != 11000-9000 { // jumped forward
		t.Errorf("offset %d, want it clamped to redisNow − t1 = %d", got, 11000-9000)
	}
}

// Only the last 16 samples count: a good round trip long ago does not
// outweigh the current clock.
func TestForgetsOldSamples(t *testing.T) {
	var e Estimator
	e.Sample(1000+1, 0, 2) // rtt 2: offset 1000
	var got int64
	for i := range int64(16) {
		t0 := 100 + 1000*i
		got = e.Sample(t0+2000+50, t0, t0+100) // rtt 100: offset 2000
	}
	if got != 2000 {
		t.Errorf("offset %d after 16 newer samples, want 2000", got)
	}
}
