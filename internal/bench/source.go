package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/internal/clockoffset"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// benchSource takes one permit for a worker: it waits until the permit may
// start and returns its scheduled and start times, Unix ns on the Redis clock.
type benchSource interface {
	take(ctx context.Context, w *benchWorker) (sched, start int64, err error)
	// granted reads the limiter's total of permits granted, to every
	// process, from Redis (limiter.State.Permits).
	granted(ctx context.Context) (int64, error)
	close() error
}

// connect creates the limiter if asked, checks that it exists, estimates the
// clock offset and reads the target rate, and returns the mode's source.
func (b *bench) connect(ctx context.Context) (benchSource, error) {
	sctx, cancel := context.WithTimeout(ctx, benchSetupTimeout)
	defer cancel()
	if b.o.HTTPURL != "" {
		return b.connectHTTP(sctx)
	}
	return b.connectRedis(sctx)
}

func (b *bench) connectRedis(ctx context.Context) (benchSource, error) {
	st := store.New(b.o.Redis)
	name := b.o.Limiter
	if b.o.Create != nil {
		if _, _, err := st.Put(ctx, name, *b.o.Create); err != nil {
			return nil, fmt.Errorf("--create: %w", err)
		}
	}
	var est clockoffset.Estimator
	for range offsetProbes {
		t0 := b.mono()
		w, err := st.Wait(ctx, name)
		t1 := b.mono()
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("limiter %q does not exist: create it with --create or the API", name)
		}
		if err != nil {
			return nil, fmt.Errorf("--redis: limiter %q: %w", name, err)
		}
		b.off0 = est.Sample(w.Now, t0, t1)
	}
	if info, err := st.Get(ctx, name); err == nil {
		b.target = configRate(info.Config)
	} else if tpl, err := st.Resolve(ctx, name); err == nil {
		b.target = configRate(tpl.Limiter)
	}
	if b.o.Mode == ModeDirect {
		return &directSource{storeTotal{b, st}}, nil
	}
	c := client.NewWithTransport(&countingTransport{Transport: redisclient.NewTransport(st), calls: &b.remote})
	l, err := c.Limiter(name)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &poolSource{storeTotal: storeTotal{b, st}, c: c, l: l}, nil
}

// storeTotal is the granted of the sources that reach the store directly.
type storeTotal struct {
	b  *bench
	st *store.Store
}

func (s storeTotal) granted(ctx context.Context) (int64, error) {
	w, err := s.st.Wait(ctx, s.b.o.Limiter)
	return w.Permits, err
}

// configRate is a config's rate in permits per second (0 if unreadable).
func configRate(c limiter.Config) float64 {
	n, _, err := c.Normalize()
	if err != nil {
		return 0
	}
	return n.Rate
}
