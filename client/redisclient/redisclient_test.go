package redisclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// A client over a store of another key prefix takes from that prefix's
// limiters only; New's, under the default prefix, does not see them.
func TestNewWithStorePrefix(t *testing.T) {
	m, rdb := redistest.Mini(t)
	m.SetTime(time.Unix(1_800_000_000, 0))
	ctx := context.Background()
	st := store.New(rdb, store.WithPrefix("other"))
	if _, _, err := st.Put(ctx, "orders", limiter.Config{Rate: 10}); err != nil {
		t.Fatal(err)
	}
	prefixed := redisclient.NewWithStore(st)
	defer prefixed.Close()
	d, err := prefixed.Acquire(ctx, "orders", 1, limitd.Forever)
	if err != nil || !d.Granted || d.Permits != 1 {
		t.Errorf("acquire under the store's prefix: %+v, %v", d, err)
	}
	plain := redisclient.New(rdb)
	defer plain.Close()
	if _, err := plain.Acquire(ctx, "orders", 1, limitd.Forever); !errors.Is(err, limiter.ErrNotFound) {
		t.Errorf("acquire under the default prefix: %v, want limiter.ErrNotFound", err)
	}
}
