package bench

import (
	"context"
	"fmt"

	"github.com/limitd/limitd"
)

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
