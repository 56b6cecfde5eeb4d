package xds

import (
	"context"
	"github.com/limitd/limitd/internal/testkit/xdstest"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/limitd/limitd/internal/boot"
	"github.com/limitd/limitd/internal/testkit/logtest"
)

func unitConfig(unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "web", Domain: "web", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "ip", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: 5}}}}
}

// An invalid update is NACKed at once and logged once; the management
// server sends it again at once, as go-control-plane's does, and each next
// NACK of it waits a back-off (Initial, doubled up to Max): a request per
// back-off, not a storm. The back-offs are the test's: each is counted, the
// requests the server received are counted at each, and no time passes. A
// valid update then is ACKed and ends the run: the next invalid one is
// NACKed at once again, and logged.
func TestNackBackoff(t *testing.T) {
	m := xdstest.Start(t, nil)
	logs := &logtest.Buffer{}
	applied := make(chan *boot.File, 1)
	waits := make(chan time.Duration)
	release := make(chan struct{})
	var rejected []string
	var mu sync.Mutex
	o := Options{Server: m.Addr, NodeID: "n", Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Backoff: Backoff{Initial: time.Second, Max: 4 * time.Second},
		Apply: func(ctx context.Context, f *boot.File) error {
			select {
			case applied <- f:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Rejected: func(err error) { mu.Lock(); rejected = append(rejected, err.Error()); mu.Unlock() },
		wait: func(ctx context.Context, d time.Duration) error {
			if d == 0 {
				return nil
			}
			select {
			case waits <- d:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { Run(ctx, o) })
	defer wg.Wait()
	defer cancel()

	next := func(what string) time.Duration {
		t.Helper()
		select {
		case d := <-waits:
			return d
		case f := <-applied:
			t.Fatalf("%s: rules applied (%s), want a back-off", what, f.Sum)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no back-off asked for", what)
		}
		return 0
	}
	apply := func(what string) *boot.File {
		t.Helper()
		select {
		case f := <-applied:
			return f
		case d := <-waits:
			t.Fatalf("%s: a back-off of %v, want the rules applied", what, d)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: not applied", what)
		}
		return nil
	}
	errorLines := func() int { return strings.Count(logs.String(), "level=ERROR") }

	m.Set(t, "n", "1", unitConfig(rlsconfv3.RateLimitUnit_HOUR))
	apply("version 1")

	m.Set(t, "n", "2", unitConfig(rlsconfv3.RateLimitUnit_UNKNOWN))
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if d := next("version 2"); d != want {
			t.Fatalf("back-off %d: %v, want %v", i+1, d, want)
		}
		if n := m.NACKs(); n != i+1 {
			t.Fatalf("NACKs received before back-off %d: %d, want %d (one per back-off)", i+1, n, i+1)
		}
		if i < 3 {
			release <- struct{}{}
		}
	}
	if n := errorLines(); n != 1 {
		t.Errorf("%d ERROR lines for 4 NACKs of one update, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "version=2") {
		t.Errorf("the ERROR line does not name the version:\n%s", logs)
	}
	mu.Lock()
	if len(rejected) != 1 {
		t.Errorf("Rejected told %d times, want once: %v", len(rejected), rejected)
	}
	mu.Unlock()

	// Fixed while the client waits: the NACK that ends the wait brings it.
	m.Set(t, "n", "3", unitConfig(rlsconfv3.RateLimitUnit_MONTH))
	release <- struct{}{}
	if f := apply("version 3"); len(f.Templates) != 1 || f.Templates[0].Limiter.Period != "720h0m0s" {
		t.Errorf("version 3 applied %+v, want the month's window", f.Templates)
	}
	if n := m.NACKs(); n != 5 {
		t.Errorf("NACKs %d, want 5 (the last one ended the fourth back-off)", n)
	}

	// A new invalid update: NACKed at once, logged, then paced from Initial.
	m.Set(t, "n", "4", unitConfig(rlsconfv3.RateLimitUnit_UNKNOWN))
	if d := next("version 4"); d != time.Second {
		t.Errorf("first back-off of a new run %v, want 1s", d)
	}
	if n, lines := m.NACKs(), errorLines(); n != 6 || lines != 2 {
		t.Errorf("NACKs %d, ERROR lines %d; want 6 and 2", n, lines)
	}
}
