// Package bench is the library behind limitd bench, the load and accuracy
// harness (the README's "limitd bench"). Workers take permits from one limiter as fast as
// it lets them, and the bench reports the rate they got, each permit's
// lateness (start − scheduled) and how many round trips it cost. Several
// bench processes on one limiter, each with a permit log, show whether the
// shared schedule holds across processes: merge the logs and count.
// Scheduled times are converted to the local clock with the offset estimator
// the client uses (internal/clockoffset); cmd/limitd keeps the flags.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/limiter"
)

// Config is one run, as the flags of limitd bench give it (see its usage).
type Config struct {
	// Redis is the shared Redis, for ModePool and ModeDirect. Run does not
	// close it.
	Redis redis.UniversalClient
	// HTTPURL is a limitd server (http://host:port, no trailing slash), for
	// ModeHTTP; with it Redis is not used.
	HTTPURL string
	// Limiter is the limiter (or template instance) to take permits from.
	Limiter string
	// Create, if set, creates or replaces the limiter first; CreateBody is
	// the same config as the PUT body of ModeHTTP.
	Create     *limiter.Config
	CreateBody []byte
	Workers    int           // goroutines taking permits, ≥ 1
	Duration   time.Duration // run for this long; 0: until Permits
	Permits    int64         // run until this many permits; 0: for Duration
	Mode       string        // ModePool, ModeDirect or ModeHTTP
	LogPath    string        // a file for one line per permit; "": none
	JSON       bool          // print the Result as JSON, and no progress
}

// Bench modes.
const (
	ModePool   = "pool"
	ModeDirect = "direct"
	ModeHTTP   = "http"
)

const (
	// benchBackoff is how long a worker waits after a failed call, so that a
	// refused connection does not become a busy loop.
	benchBackoff = 20 * time.Millisecond
	// benchSetupTimeout bounds creating the limiter and the first probes.
	benchSetupTimeout = 10 * time.Second
	// offsetProbes is how many round trips estimate the clock offset before
	// the run (the best of them is kept).
	offsetProbes = 5
)

// Run makes one run of limitd bench until the duration or the permits are
// done, or ctx ends, and prints the summary (or with JSON the Result) on
// stdout, progress and warnings on stderr. It does not close cfg.Redis.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	o := &cfg
	b := &bench{o: o, base: time.Now(), stderr: stderr}
	src, err := b.connect(ctx)
	if err != nil {
		return err
	}
	if o.LogPath != "" {
		if b.log, err = openPermitLog(o.LogPath); err != nil {
			src.close()
			return fmt.Errorf("--log: %w", err)
		}
	}
	res := b.run(ctx, src)
	// Unused permits that cannot be handed back (Redis gone, limiter
	// re-created) are only lost schedule time: a warning, not a failed run.
	if err := src.close(); err != nil {
		fmt.Fprintf(stderr, "limitd bench: handing back unused permits: %s\n", oneLine(err.Error()))
	}
	var logErr error
	if b.log != nil {
		if err := b.log.close(); err != nil {
			logErr = fmt.Errorf("--log %s: %w", o.LogPath, err)
		}
	}
	if o.JSON {
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			return err
		}
	} else {
		b.printSummary(stdout, res)
	}
	if n := b.fallback(); n > 0 {
		fmt.Fprintf(stderr, "limitd bench: %d permits came from the client's local fallback while Redis was unreachable\n", n)
	}
	if res.Errors > 0 {
		fmt.Fprintf(stderr, "limitd bench: %d errors; the last: %s\n", res.Errors, oneLine(b.lastError()))
	}
	return logErr
}

// oneLine keeps an error on the line it is printed on.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", "; ").Replace(strings.TrimSpace(s))
}

// bench is one run.
type bench struct {
	o      *Config
	base   time.Time // local monotonic origin: local times are ns since base
	stderr io.Writer
	off0   int64   // Redis − local ns, from the probes before the run
	target float64 // the limiter's configured rate

	remote  atomic.Int64 // grant/acquire round trips
	errs    atomic.Int64
	claimed atomic.Int64 // permits claimed by workers, with --permits
	lastErr atomic.Pointer[error]

	workers []*benchWorker
	log     *permitLog
}

func (b *bench) mono() int64 { return int64(time.Since(b.base)) }

func (b *bench) fail(err error) {
	b.errs.Add(1)
	b.lastErr.Store(&err)
}

func (b *bench) lastError() string {
	if err := b.lastErr.Load(); err != nil {
		return (*err).Error()
	}
	return ""
}

// run starts the workers and the progress line and waits for the end.
func (b *bench) run(ctx context.Context, src benchSource) Result {
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if b.o.Duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, b.o.Duration)
	}
	defer cancel()
	b.workers = make([]*benchWorker, b.o.Workers)
	for i := range b.workers {
		b.workers[i] = &benchWorker{b: b, off: b.off0}
		if b.log != nil {
			b.workers[i].batch = b.log.batch()
		}
	}
	// The limiter's total before and after: what every process sharing it
	// was granted meanwhile.
	all0, allErr := src.granted(ctx)
	start := b.mono()
	var wg sync.WaitGroup
	for _, w := range b.workers {
		wg.Go(func() { w.loop(runCtx, src) })
	}
	done := make(chan struct{})
	var pwg sync.WaitGroup
	if !b.o.JSON {
		pwg.Go(func() { b.progress(done, start) })
	}
	wg.Wait()
	end := b.mono()
	close(done)
	pwg.Wait()
	for _, w := range b.workers {
		if b.log != nil {
			b.log.send(w.batch)
			w.batch = nil
		}
	}
	r := b.result(float64(end-start) / 1e9)
	if allErr == nil {
		if all1, err := src.granted(context.WithoutCancel(ctx)); err == nil && all1 >= all0 {
			r.AllPermits = all1 - all0
			if r.Seconds > 0 {
				r.AllRate = float64(r.AllPermits) / r.Seconds
			}
		}
	}
	return r
}

func (b *bench) fallback() int64 {
	var n int64
	for _, w := range b.workers {
		n += w.fallback.Load()
	}
	return n
}
