// Package clockoffset estimates the offset of the Redis clock from a local
// monotonic clock, from the round trips a caller makes anyway. The client's
// pools and leases and limitd bench use it to convert scheduled times (Redis
// TIME) to local time, with an error of at most half the best round trip;
// store, to choose a fixed window from Redis' clock without a script.
package clockoffset

import "sync"

// Estimator converts Redis time to a local clock. Each round trip gives a
// sample offset = redis − local midpoint, wrong by at most half the round
// trip; the estimate is the sample with the shortest round trip of the
// recent ones, kept within what the current round trip allows (Redis read
// its clock between t0 and t1). Unclamped, an older sample could place a
// permit that Redis granted for now a little after the reply arrived, and a
// caller refuse it. The zero value is ready; it is safe for concurrent use.
type Estimator struct {
	mu      sync.Mutex
	samples [16]struct{ rtt, off int64 }
	n       int
}

// Sample records one round trip, sent at local t0 and answered at local t1
// with Redis time redisNow (ns both), and returns the estimated offset:
// Redis ns − local ns.
func (e *Estimator) Sample(redisNow, t0, t1 int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.samples[e.n%len(e.samples)] = struct{ rtt, off int64 }{t1 - t0, redisNow - t0 - (t1-t0)/2}
	e.n++
	best := e.samples[0]
	for i := 1; i < min(e.n, len(e.samples)); i++ {
		if e.samples[i].rtt < best.rtt {
			best = e.samples[i]
		}
	}
	return min(max(best.off, redisNow-t1), redisNow-t0)
}
