package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/internal/clockoffset"
	"github.com/limitd/limitd/limiter"
)

// benchWorker is one goroutine taking permits. Its histogram and counters are
// written by it alone and read atomically by the progress line.
type benchWorker struct {
	b        *bench
	hist     latencyHist
	fallback atomic.Int64 // permits from the client's local fallback
	off      int64        // Redis − local ns, the latest estimate
	est      clockoffset.Estimator
	batch    []int64 // log records not yet handed to the writer: sched, start, ...
}

func (w *benchWorker) loop(ctx context.Context, src benchSource) {
	b := w.b
	for ctx.Err() == nil {
		if b.o.Permits > 0 && b.claimed.Add(1) > b.o.Permits {
			return
		}
		sched, start, err := src.take(ctx, w)
		if err != nil {
			if b.o.Permits > 0 {
				b.claimed.Add(-1)
			}
			if ctx.Err() != nil || errors.Is(err, limiter.ErrDeadline) {
				return // the run is over: the next permit starts after its end
			}
			b.fail(err)
			_ = sleep(ctx, benchBackoff)
			continue
		}
		w.hist.add(start - sched)
		if w.batch != nil {
			w.batch = append(w.batch, sched, start)
			if len(w.batch) == cap(w.batch) {
				b.log.send(w.batch)
				w.batch = b.log.batch()
			}
		}
	}
}

// await sleeps until a decision's start (Redis time) on the local clock and
// returns the permit's times; t0 and t1 are the local times around the call
// that returned the decision, made at Redis time now.
func (w *benchWorker) await(ctx context.Context, sched, start, now, t0, t1 int64) (int64, int64, error) {
	off := w.est.Sample(now, t0, t1)
	w.off = off
	if err := sleep(ctx, time.Duration(start-off-w.b.mono())); err != nil {
		return 0, 0, err
	}
	// The worker got the permit now; it cannot have got it before the start
	// the schedule gave it, whatever the offset's error.
	return sched, max(w.b.mono()+off, start), nil
}

// sleep waits d on the system clock, or until ctx is done.
var sleep = limiter.SystemClock().Sleep
