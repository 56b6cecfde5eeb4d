package bench

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"
)

// Result is limitd bench's --json object (the README's "limitd bench"), field for field.
type Result struct {
	Mode        string  `json:"mode"`
	Workers     int     `json:"workers"`
	Permits     int64   `json:"permits"`
	Seconds     float64 `json:"seconds"`
	Rate        float64 `json:"rate"`
	TargetRate  float64 `json:"target_rate"`
	RemoteCalls int64   `json:"remote_calls"`
	Errors      int64   `json:"errors"`
	Lateness    struct {
		P50 int64 `json:"p50"`
		P99 int64 `json:"p99"`
		Max int64 `json:"max"`
	} `json:"lateness_ns"`
	// The permits granted during the run to every process sharing the
	// limiter (its total in Redis), and their rate; 0 when unknown. Not in --json.
	AllPermits int64   `json:"-"`
	AllRate    float64 `json:"-"`
}

func (b *bench) result(seconds float64) Result {
	var counts histCounts
	var maxLate int64
	for _, w := range b.workers {
		w.hist.addTo(&counts)
		maxLate = max(maxLate, w.hist.max.Load())
	}
	r := Result{Mode: b.o.Mode, Workers: b.o.Workers, Permits: counts.total(), Seconds: seconds,
		TargetRate: b.target, RemoteCalls: b.remote.Load(), Errors: b.errs.Load()}
	if seconds > 0 {
		r.Rate = float64(r.Permits) / seconds
	}
	r.Lateness.P50 = min(counts.quantile(0.50), maxLate)
	r.Lateness.P99 = min(counts.quantile(0.99), maxLate)
	r.Lateness.Max = maxLate
	return r
}

// progress prints a line on stderr every second until done: permits so far,
// and the rate and p99 lateness of the last second.
func (b *bench) progress(done <-chan struct{}, start int64) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prev histCounts
	prevN, prevT := int64(0), start
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		var cur histCounts
		for _, w := range b.workers {
			w.hist.addTo(&cur)
		}
		now := b.mono()
		n := cur.total()
		var last histCounts
		for i := range last {
			last[i] = cur[i] - prev[i]
		}
		rate := float64(n-prevN) / (float64(now-prevT) / 1e9)
		line := fmt.Sprintf("limitd bench: %4.0fs  %d permits  %.1f/s  p99 lateness %v",
			float64(now-start)/1e9, n, rate, fmtNs(last.quantile(0.99)))
		if e := b.errs.Load(); e > 0 {
			line += fmt.Sprintf("  errors %d (last: %s)", e, oneLine(b.lastError()))
		}
		if f := b.fallback(); f > 0 {
			line += fmt.Sprintf("  fallback permits %d", f)
		}
		fmt.Fprintln(b.stderr, line)
		prev, prevN, prevT = cur, n, now
	}
}

func (b *bench) printSummary(out io.Writer, r Result) {
	target := "unknown"
	ofTarget := func(rate float64) string { return "" }
	if r.TargetRate > 0 {
		target = strconv.FormatFloat(r.TargetRate, 'g', -1, 64) + "/s"
		ofTarget = func(rate float64) string { return fmt.Sprintf(" (%.2f%% of the target)", 100*rate/r.TargetRate) }
	}
	fmt.Fprintf(out, "limitd bench: %s mode, %d workers, limiter %q, target %s\n", r.Mode, r.Workers, b.o.Limiter, target)
	fmt.Fprintf(out, "  permits       %d in %.3fs: %.1f/s%s\n", r.Permits, r.Seconds, r.Rate, ofTarget(r.Rate))
	if r.AllPermits > 0 && r.AllPermits > r.Permits {
		fmt.Fprintf(out, "  all processes %d granted on the limiter meanwhile: %.1f/s%s; this process took %.1f%% of them (shared)\n",
			r.AllPermits, r.AllRate, ofTarget(r.AllRate), 100*float64(r.Permits)/float64(r.AllPermits))
	}
	fmt.Fprintf(out, "  lateness      p50 %v  p99 %v  max %v\n", fmtNs(r.Lateness.P50), fmtNs(r.Lateness.P99), fmtNs(r.Lateness.Max))
	per := ""
	if r.RemoteCalls > 0 {
		per = fmt.Sprintf(" (%.1f permits per call)", float64(r.Permits)/float64(r.RemoteCalls))
	}
	fmt.Fprintf(out, "  remote calls  %d%s\n", r.RemoteCalls, per)
	fmt.Fprintf(out, "  errors        %d\n", r.Errors)
}

// fmtNs shows a duration in ns rounded to what a reader needs.
func fmtNs(ns int64) time.Duration {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	default:
		return d
	}
}

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
