package bench

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
)

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
