package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/internal/clockoffset"
	"github.com/limitd/limitd/internal/httpjson"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
	"github.com/limitd/limitd/wire"
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

// directSource makes one acquire script call per permit.
type directSource struct{ storeTotal }

func (s *directSource) take(ctx context.Context, w *benchWorker) (int64, int64, error) {
	t0 := s.b.mono()
	d, err := s.st.Acquire(ctx, s.b.o.Limiter, 1, limitd.Forever)
	t1 := s.b.mono()
	s.b.remote.Add(1)
	if err != nil {
		return 0, 0, err
	}
	if !d.Granted {
		return 0, 0, fmt.Errorf("limiter %q denied a request without a max wait", s.b.o.Limiter)
	}
	return w.await(ctx, d.Scheduled, d.Start, d.Now, t0, t1)
}

func (s *directSource) close() error { return nil }

// poolSource takes permits through the client's local pool.
type poolSource struct {
	storeTotal
	c *client.Client
	l *client.Limiter
}

func (s *poolSource) take(ctx context.Context, w *benchWorker) (int64, int64, error) {
	p, err := s.l.Wait(ctx)
	if err != nil {
		return 0, 0, err
	}
	now := s.b.mono()
	if p.Shared {
		start := p.Start.UnixNano()
		w.off = start - now
		return p.Scheduled.UnixNano(), start, nil
	}
	// From the local fallback: its times are on the local clock. Convert them
	// with the offset of the last shared permit (or of the probes).
	w.fallback.Add(1)
	return int64(p.Scheduled.Sub(s.b.base)) + w.off, now + w.off, nil
}

func (s *poolSource) close() error { return s.c.Close() }

// countingTransport is the client's Redis transport, counting grants.
type countingTransport struct {
	client.Transport
	calls *atomic.Int64
}

func (t *countingTransport) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	t.calls.Add(1)
	return t.Transport.Grant(ctx, name, k, maxWait)
}

// httpSource makes one POST .../acquire per permit over kept-alive connections.
type httpSource struct {
	b          *bench
	hc         *http.Client
	acquireURL string
	waitURL    string
	token      string
}

func (s *httpSource) granted(ctx context.Context) (int64, error) {
	var w wire.WaitState
	_, err := httpjson.Do(ctx, s.hc, http.MethodGet, s.waitURL, s.token, nil, &w)
	return w.Permits, err
}

var acquireBody = []byte(`{"permits":1}`)

func (b *bench) connectHTTP(ctx context.Context) (benchSource, error) {
	hc := &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        b.o.Workers + 4,
		MaxIdleConnsPerHost: b.o.Workers + 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
	limURL := b.o.HTTPURL + "/v1/limiters/" + url.PathEscape(b.o.Limiter)
	token := os.Getenv("LIMITD_TOKEN")
	fail := func(err error) (benchSource, error) {
		hc.CloseIdleConnections()
		return nil, err
	}
	if b.o.Create != nil {
		var view wire.Limiter
		if _, err := httpjson.Do(ctx, hc, http.MethodPut, limURL, os.Getenv("LIMITD_ADMIN_TOKEN"), b.o.CreateBody, &view); err != nil {
			return fail(fmt.Errorf("--create: %w", err))
		}
	}
	var est clockoffset.Estimator
	for range offsetProbes {
		var w wire.WaitState
		t0 := b.mono()
		status, err := httpjson.Do(ctx, hc, http.MethodGet, limURL+"/wait", token, nil, &w)
		t1 := b.mono()
		if status == http.StatusNotFound {
			return fail(fmt.Errorf("limiter %q does not exist: create it with --create or the API", b.o.Limiter))
		}
		if err != nil {
			return fail(fmt.Errorf("--http: limiter %q: %w", b.o.Limiter, err))
		}
		b.off0 = est.Sample(w.Now, t0, t1)
	}
	var view wire.Limiter
	if _, err := httpjson.Do(ctx, hc, http.MethodGet, limURL, token, nil, &view); err == nil {
		b.target = configRate(view.Config)
	}
	return &httpSource{b: b, hc: hc, acquireURL: limURL + "/acquire", waitURL: limURL + "/wait", token: token}, nil
}

func (s *httpSource) take(ctx context.Context, w *benchWorker) (int64, int64, error) {
	var g wire.Granted
	t0 := s.b.mono()
	status, err := httpjson.Do(ctx, s.hc, http.MethodPost, s.acquireURL, s.token, acquireBody, &g)
	t1 := s.b.mono()
	s.b.remote.Add(1)
	if err != nil {
		return 0, 0, err
	}
	if !g.Granted {
		return 0, 0, fmt.Errorf("POST %s: answered %d without a grant", s.acquireURL, status)
	}
	return w.await(ctx, g.Scheduled, g.Start, g.Now, t0, t1)
}

func (s *httpSource) close() error {
	s.hc.CloseIdleConnections()
	return nil
}
