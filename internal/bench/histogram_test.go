package bench

import (
	"math"
	"testing"
)

// The histogram keeps every quantile within its bucket's width (under 1%).
func TestBenchHistogram(t *testing.T) {
	for v := int64(0); v < 1<<20; v += 1 + v/100 {
		i := histBucket(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucket of %d is %d", v, i)
		}
		if got := histValue(i); math.Abs(float64(got-v)) > math.Max(1, float64(v)/64) {
			t.Fatalf("value %d lands in bucket %d of value %d", v, i, got)
		}
		if i > 0 && histBucket(v) < histBucket(v-1) {
			t.Fatalf("buckets not monotonic at %d", v)
		}
	}
	if i := histBucket(math.MaxInt64); i != histBuckets-1 {
		t.Errorf("bucket of MaxInt64 is %d, want the last, %d", i, histBuckets-1)
	}
	var h latencyHist
	for v := int64(1); v <= 100_000; v++ {
		h.add(v * 1000) // 1µs … 100ms, uniform
	}
	h.add(-5) // a negative lateness counts as 0
	var c histCounts
	h.addTo(&c)
	if n := c.total(); n != 100_001 {
		t.Fatalf("total %d", n)
	}
	for _, q := range []struct {
		q    float64
		want int64
	}{{0.5, 50_000_000}, {0.99, 99_000_000}} {
		got := c.quantile(q.q)
		if math.Abs(float64(got-q.want))/float64(q.want) > 0.01 {
			t.Errorf("p%v = %d, want %d ± 1%%", 100*q.q, got, q.want)
		}
	}
	if h.max.Load() != 100_000_000 {
		t.Errorf("max %d", h.max.Load())
	}
}
