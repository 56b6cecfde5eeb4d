package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// When Redis refuses the password as a connection opens, every kind of call
// fails with ErrUnauthorized, pipelines included: go-redis sets that
// failure on a pipeline alone, and its commands must not read as answered
// (an acquire's empty reply, a limiter found lost).
func TestWrongPasswordEveryPath(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	srv.AddUser("limitd", "right-pw")
	if _, _, err := store.New(srv.UserClient("limitd", "right-pw")).Put(ctx, "r", limiter.Config{Rate: 100}); err != nil {
		t.Fatal(err)
	}
	st := store.New(srv.UserClient("limitd", "wrong-pw"), store.WithBatching(8))
	defer st.Close()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrUnauthorized) || !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnauthorized", what, err)
		}
	}
	_, err := st.Acquire(ctx, "r", 1, 0)
	check("Acquire (batched)", err)
	outs := st.AcquireMany(ctx, []store.Request{{Name: "r", Permits: 1}, {Name: "r", Permits: 2}})
	for _, o := range outs {
		check("AcquireMany", o.Err)
	}
	_, errs := st.WaitMany(ctx, []string{"r"})
	check("WaitMany", errs[0])
	lost, _, err := st.Lost(ctx, []string{"r"}, nil)
	check("Lost", err)
	if len(lost) != 0 {
		t.Errorf("Lost found %v lost: a refused password is not a data loss", lost)
	}
	check("Ready", st.Ready(ctx))
}
