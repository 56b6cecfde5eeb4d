package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/limitd/limitd/internal/clockoffset"
	"github.com/limitd/limitd/internal/httpjson"
	"github.com/limitd/limitd/wire"
)

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
