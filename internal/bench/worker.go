package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"os"
	"strconv"
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

// permitLog writes --log lines from one goroutine: workers hand it full
// batches of records, so a permit costs them an append.
type permitLog struct {
	f    *os.File
	ch   chan []int64 // full batches, to write
	free chan []int64 // written batches, to reuse
	done chan struct{}
	err  error // the first
}

const (
	logBatch  = 4096 // int64s per batch: 2048 permits
	logBuffer = 1 << 20
)

func openPermitLog(path string) (*permitLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	l := &permitLog{f: f, ch: make(chan []int64, 64), free: make(chan []int64, 64), done: make(chan struct{})}
	go l.write()
	return l, nil
}

func (l *permitLog) batch() []int64 {
	select {
	case b := <-l.free:
		return b[:0]
	default:
		return make([]int64, 0, logBatch)
	}
}

func (l *permitLog) send(b []int64) {
	if len(b) > 0 {
		l.ch <- b
	}
}

func (l *permitLog) write() {
	defer close(l.done)
	w := bufio.NewWriterSize(l.f, logBuffer)
	line := make([]byte, 0, 48)
	for b := range l.ch {
		for i := 0; i+1 < len(b); i += 2 {
			line = strconv.AppendInt(line[:0], b[i], 10)
			line = append(line, ' ')
			line = strconv.AppendInt(line, b[i+1], 10)
			line = append(line, '\n')
			_, err := w.Write(line)
			l.err = cmp.Or(l.err, err)
		}
		select {
		case l.free <- b:
		default:
		}
	}
	l.err = cmp.Or(l.err, w.Flush())
}

func (l *permitLog) close() error {
	close(l.ch)
	<-l.done
	l.err = cmp.Or(l.err, l.f.Close())
	return l.err
}
