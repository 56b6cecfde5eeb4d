package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/wire"
)

// signalStep is how often the process's one sampler reads every watched limiter.
const signalStep = time.Second

// signals is the API's side of the process's one sampler (core.Watcher):
// while Run runs it hands every round to the event hub and works out the
// status the event streams send. Every signal is the watcher's: the API only
// writes it out.
type signals struct {
	w        *core.Watcher
	svc      *core.Service
	timeout  time.Duration
	embedded bool // Options.EmbeddedRedis
	// status is told every status that differs from the one before; round
	// every round.
	status func(wire.StreamStatus)
	round  func(*core.Round)

	mu     sync.Mutex
	last   wire.StreamStatus
	known  bool   // last was set
	rounds uint64 // rounds handed on
}

// run runs the watcher until ctx ends, handing on each round.
func (g *signals) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	rounds, unsubscribe := g.w.Subscribe()
	defer unsubscribe()
	done := make(chan struct{})
	go func() { g.w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-rounds:
			if r.Full || g.rounds == 0 {
				g.tell(ctx, r.Err, len(r.Listed))
			}
			if g.round != nil {
				g.round(r)
			}
			g.mu.Lock()
			g.rounds++ // after the status: a round is done once told
			g.mu.Unlock()
		}
	}
}

// tell works out the status after a round (failed: why Redis could not
// serve it) and hands it to status when it changed. A round only reads, so
// after one that Redis served the status also asks what /readyz asks
// (core.Service.Ready: does Redis take a write?): a user that may read but
// not write (NOPERM), or a replica (READONLY), is never told "ok".
func (g *signals) tell(ctx context.Context, failed error, listed int) {
	if failed == nil || !errors.Is(failed, core.ErrUnavailable) && !errors.Is(failed, context.DeadlineExceeded) {
		rctx, cancel := context.WithTimeout(ctx, g.timeout)
		failed = g.svc.Ready(rctx)
		cancel()
	}
	st := g.statusAfter(failed)
	st.Limiters = listed
	g.mu.Lock()
	changed := !g.known || st != g.last
	g.last, g.known = st, true
	g.mu.Unlock()
	if changed && g.status != nil {
		g.status(st)
	}
}

// statusAfter is the status after a readiness check that returned err:
// Redis up or why it is not, a data loss, and whether limitd is ready.
func (g *signals) statusAfter(err error) wire.StreamStatus {
	st := wire.StreamStatus{Redis: redisUp(g.embedded)}
	if err != nil && !errors.Is(err, core.ErrDataLost) {
		// The cause where core knows it, "unavailable" otherwise.
		st.Redis, st.RedisDetail = redisCauses[core.RedisCauseOf(err)].redis, unavailableDetail(g.svc, err)
	}
	at, pending, _ := g.svc.DataLoss()
	st.DataLost, st.Ready = at, err == nil && !pending
	return st
}

// probe works out a status without a round (none ran yet): whether Redis
// can serve, and how many limiters it names.
func (g *signals) probe(ctx context.Context) wire.StreamStatus {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	st := g.statusAfter(g.svc.Ready(ctx))
	if wire.RedisServing(st.Redis) {
		if page, err := g.svc.List(ctx, "", core.MaxWatched); err == nil {
			st.Limiters = len(page.Limiters)
		}
	}
	return st
}

// signalsOf writes a limiter's newest signals out: its rates and health,
// and its kind's reading in the fields that apply to it.
func signalsOf(s core.Signals) wire.Signals {
	w := historyOf(s)
	w.Span, w.Health = s.Span, string(s.Health) // an instance's health takes its counts
	r := s.Reading
	switch {
	case r.Counted:
		w.Limit, w.Remaining, w.ResetAt = new(r.Limit), new(r.Remaining), new(r.ResetAt)
	case r.Scheduled:
		w.Backlog, w.LatenessTotal = new(r.Backlog), new(r.LatenessTotal)
	case r.Slots:
		w.Limit, w.InUse, w.Free = new(r.Limit), new(r.InUse), new(r.Free)
		if r.NextExpiry != 0 {
			w.NextExpiry = new(r.NextExpiry)
		}
	case r.Shares:
		w.Held, w.Wanted, w.Capacity = new(r.Held), new(r.Wanted), new(r.Capacity)
	}
	if r.Rate {
		w.Permits = new(r.Permits)
	}
	if c := s.Instance; c != nil {
		w.Instance = &wire.InstanceCounts{Template: c.Template, Since: c.Since, Tracked: c.Tracked,
			Granted: c.Granted, Refused: c.Refused}
	}
	return w
}

// historyOf is a sample as GET /v1/history answers it.
func historyOf(s core.Signals) wire.Signals {
	return wire.Signals{T: s.At, GrantedPerS: s.GrantedPerS, GrantedCallsPerS: s.GrantedCallsPerS,
		RefusedPerS: s.RefusedPerS, RefusedCallsPerS: s.RefusedCallsPerS, ShadowRefusedPerS: s.ShadowRefusedPerS,
		Utilization: s.Utilization, Wait: s.Wait, Saturated: s.Saturated, Shadow: s.Shadow, Health: string(s.Health)}
}
