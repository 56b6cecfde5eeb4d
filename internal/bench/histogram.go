package bench

import (
	"math"
	"math/bits"
	"sync/atomic"
)

// latencyHist is a log-linear histogram of lateness in ns: exact below 128 ns,
// then 64 buckets per power of two (relative error under 1/128 at the bucket's
// middle). One goroutine writes it; others read it with atomic loads, so the
// hot path costs one uncontended atomic add.
type latencyHist struct {
	counts [histBuckets]atomic.Uint64
	max    atomic.Int64
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits             // buckets per power of two
	histBuckets = (64 - histSubBits) * histSub // the last holds MaxInt64
)

type histCounts [histBuckets]uint64

func histBucket(v int64) int {
	if v < 2*histSub {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - histSubBits - 1 // v>>e in [histSub, 2·histSub)
	return e*histSub + int(v>>e)
}

// histValue is the middle of bucket i.
func histValue(i int) int64 {
	if i < 2*histSub {
		return int64(i)
	}
	e := i/histSub - 1
	m := int64(i - e*histSub)
	return m<<e + (int64(1)<<e)/2
}

func (h *latencyHist) add(v int64) {
	v = max(v, 0)
	h.counts[histBucket(v)].Add(1)
	if v > h.max.Load() {
		h.max.Store(v) // one writer: no compare-and-swap needed
	}
}

func (h *latencyHist) addTo(c *histCounts) {
	for i := range h.counts {
		c[i] += h.counts[i].Load()
	}
}

func (c *histCounts) total() int64 {
	var n uint64
	for _, v := range c {
		n += v
	}
	return int64(n)
}

// quantile returns the value below which a fraction q of the samples lie.
func (c *histCounts) quantile(q float64) int64 {
	n := c.total()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i, v := range c {
		seen += v
		if seen >= max(rank, 1) {
			return histValue(i)
		}
	}
	return histValue(len(c) - 1)
}
