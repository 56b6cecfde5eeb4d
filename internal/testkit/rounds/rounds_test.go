package rounds

import (
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// TestTimeSideFails: an operation that fails stops its side and says so,
// from one goroutine or several; one that never fails runs until the time is
// up and counts every call.
func TestTimeSideFails(t *testing.T) {
	for _, n := range []int{1, 4} {
		calls := 0
		if _, ok := timeSide(1, time.Hour, func() bool { calls++; return calls < 100 }); ok || calls != 100 {
			t.Errorf("one goroutine: ok %v after %d calls, want false after 100", ok, calls)
		}
		ns, ok := timeSide(n, time.Millisecond, func() bool { return true })
		if !ok || ns <= 0 {
			t.Errorf("%d goroutines: %v ns/op, ok %v", n, ns, ok)
		}
	}
}
