package core

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

type chanTicker chan time.Time

func (c chanTicker) C() <-chan time.Time { return c }
func (chanTicker) Stop()                 {}

// driven is a Watcher whose rounds the test takes, one per call of round,
// on a miniredis whose clock the test moves.
type driven struct {
	t      *testing.T
	m      *miniredis.Miniredis
	w      *Watcher
	tick   chanTicker
	rounds <-chan *Round
	now    time.Time
}

func newDriven(t *testing.T, m *miniredis.Miniredis, s *Service) *driven {
	t.Helper()
	d := &driven{t: t, m: m, tick: make(chanTicker), now: t0}
	d.w = s.NewWatcher(WatcherOptions{Ticker: func(time.Duration) Ticker { return d.tick }})
	rounds, unsubscribe := d.w.Subscribe()
	d.rounds = rounds
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; unsubscribe() })
	d.wait() // the first round, at once
	return d
}

func (d *driven) wait() *Round {
	d.t.Helper()
	select {
	case r := <-d.rounds:
		return r
	case <-time.After(10 * time.Second):
		d.t.Fatal("no round within 10 s")
		return nil
	}
}

// round takes a full round now (Redis time d.now).
func (d *driven) round() *Round {
	d.t.Helper()
	d.m.SetTime(d.now)
	d.tick <- time.Time{}
	return d.wait()
}

// set moves Redis' clock to d.now.
func (d *driven) advance(dt time.Duration) {
	d.now = d.now.Add(dt)
	d.m.SetTime(d.now)
}

func (d *driven) signals(r *Round, name string) Signals {
	d.t.Helper()
	e, ok := r.Entries[name]
	if !ok || e.Err != nil {
		d.t.Fatalf("%s not read in the round: %+v", name, e)
	}
	return e.Signals
}

// A steady 20/s flow whose samples arrive 0 to 2.6 s apart (a busy
// process) charts 20/s at every sample once RateSpan of Redis time is
// behind it: rates are counts over the Redis time between reads, spanning
// several of them. Its permits are taken by a process with no ledger (a Go
// client over Redis): the limiter's state counts them.
func TestSteadyRateChartsSteadily(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	observer, _ := ledgerService(t, m, LedgerOptions{})
	client, _ := ledgerService(t, m, LedgerOptions{}) // takes the permits; its ledger is never flushed
	ctx := context.Background()
	if _, _, err := observer.Put(ctx, "steady", limiter.Config{Kind: limiter.KindSchedule, Rate: 20}); err != nil {
		t.Fatal(err)
	}
	d := newDriven(t, m, observer)
	rng := rand.New(rand.NewPCG(1, 2))
	const step = 50 * time.Millisecond // one permit each: 20/s
	var took int
	var samples []Signals
	start := d.now
	for d.now.Sub(start) < 3*time.Minute {
		gap := time.Duration(rng.Int64N(int64(2600*time.Millisecond)/int64(step)+1)) * step // 0 to 2.6 s
		for end := d.now.Add(gap); d.now.Before(end); {
			d.advance(step)
			acquireN(t, client, "steady", 1, 1)
			took++
		}
		sg := d.signals(d.round(), "steady")
		if d.now.Sub(start) > RateSpan {
			samples = append(samples, sg)
		}
	}
	worst := 0.0
	for _, sg := range samples {
		worst = max(worst, math.Abs(sg.GrantedPerS-20))
		if sg.GrantedPerS < 19 || sg.GrantedPerS > 21 || sg.Span < int64(RateSpan) {
			t.Errorf("sample at %v: %.2f/s over %v, want 20 ± 1/s over at least %v", time.Duration(sg.At-start.UnixNano()),
				sg.GrantedPerS, time.Duration(sg.Span), RateSpan)
		}
		if sg.Utilization < 0.95 || sg.Utilization > 1.05 {
			t.Errorf("sample at %v: utilization %.3f, want 1 ± 0.05", time.Duration(sg.At-start.UnixNano()), sg.Utilization)
		}
	}
	t.Logf("%d permits, %d samples 0–2.6 s apart: worst %.3f/s off 20/s", took, len(samples), worst)
	if len(samples) < 60 {
		t.Fatalf("%d samples, want many", len(samples))
	}
}

// Granted permits of a rate kind come from its state, whoever took them,
// also once a server's ledger has counted some (the bug: Go-client traffic
// vanished once a server counted); refusals come from the totals.
func TestGrantedFromStateRefusedFromTotals(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	server, ledger := ledgerService(t, m, LedgerOptions{})
	client, _ := ledgerService(t, m, LedgerOptions{})
	ctx := context.Background()
	if _, _, err := server.Put(ctx, "mixed", limiter.Config{Kind: limiter.KindSchedule, Rate: 100, Burst: ptr(limiter.Burst(1))}); err != nil {
		t.Fatal(err)
	}
	d := newDriven(t, m, server)
	acquireN(t, server, "mixed", 10, 1) // the server counts a call of 10
	if err := ledger.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d.advance(time.Second)
	d.round()
	d.advance(time.Second)
	acquireN(t, client, "mixed", 50, 1) // a Go client over Redis: no ledger flush
	// A refusal the server counts: more than max_wait 0 allows now.
	if a, err := server.Acquire(ctx, AcquireRequest{Name: "mixed", Permits: 500, MaxWait: 0}); err != nil || a.Rate == nil || a.Rate.Granted {
		t.Fatalf("acquire of 500: %+v %v, want refused", a, err)
	}
	if err := ledger.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sg := d.signals(d.round(), "mixed")
	if sg.GrantedPerS != 60.0/2 || sg.RefusedPerS != 500.0/2 || sg.RefusedCallsPerS != 0.5 || sg.Span != 2e9 {
		t.Errorf("signals %+v, want 60 permits granted (10 by the server, 50 by a client) and 500 refused over 2 s", sg)
	}
	if sg.GrantedCallsPerS != 0.5 {
		t.Errorf("granted calls %v/s, want the server's one call over 2 s (a client's are not counted)", sg.GrantedCallsPerS)
	}
	if sg.Health != HealthRefusing || !sg.Saturated {
		t.Errorf("health %q saturated %v, want refusing", sg.Health, sg.Saturated)
	}
}

// A shadow limiter refuses nobody: its would-be refusals are
// ShadowRefusedPerS, its health would_refuse, never refusing.
func TestShadowWouldRefuse(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	s, ledger := ledgerService(t, m, LedgerOptions{})
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "shadowed", limiter.Config{Kind: limiter.KindSchedule, Rate: 1, Burst: ptr(limiter.Burst(1)), Shadow: true}); err != nil {
		t.Fatal(err)
	}
	d := newDriven(t, m, s)
	d.advance(time.Second)
	d.round()
	acquireN(t, s, "shadowed", 1, 5) // one granted, four let through
	if err := ledger.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d.advance(time.Second)
	sg := d.signals(d.round(), "shadowed")
	if sg.RefusedPerS != 0 || sg.RefusedCallsPerS != 0 || sg.ShadowRefusedPerS <= 0 || !sg.Shadow {
		t.Errorf("shadow: %+v, want nothing refused, would-be refusals in ShadowRefusedPerS", sg)
	}
	if sg.Health != HealthWouldRefuse {
		t.Errorf("health %q, want %q", sg.Health, HealthWouldRefuse)
	}
	if h := d.w.History([]string{"shadowed"})["shadowed"]; len(h) == 0 || h[len(h)-1].ShadowRefusedPerS != sg.ShadowRefusedPerS ||
		h[len(h)-1].RefusedPerS != 0 || h[len(h)-1].Health != HealthWouldRefuse {
		t.Errorf("history %+v, want the would-be refusals kept as such", h)
	}
}

// A template instance watched is read from its state, and its refusals
// and health from its template's busiest-instances sets: one refused 60 %
// of its permits is refusing, never ok.
func TestInstanceCountsUnderTemplate(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	s, ledger := ledgerService(t, m, LedgerOptions{})
	ctx := context.Background()
	if _, _, err := s.PutTemplate(ctx, limitd.Template{ID: "users", Pattern: "user:*",
		Limiter: limiter.Config{Kind: limiter.KindSchedule, Rate: 2, Burst: ptr(limiter.Burst(1))}}); err != nil {
		t.Fatal(err)
	}
	d := newDriven(t, m, s)
	unwatch := d.w.Watch([]string{"user:1", "user:2"})
	defer unwatch()
	r := d.wait() // a partial round: the names just watched
	if r.Full || r.Entries["user:1"].Limiter.Template != "users" {
		t.Fatalf("partial round %+v, want user:1 read as an instance", r)
	}
	for range 25 { // 5 a second of a 2/s limiter: 60 % refused
		d.advance(200 * time.Millisecond)
		if _, err := s.Acquire(ctx, AcquireRequest{Name: "user:1", Permits: 1, MaxWait: 0}); err != nil {
			t.Fatal(err)
		}
	}
	acquireN(t, s, "user:2", 1, 1)
	if err := ledger.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sg := d.signals(d.round(), "user:1")
	c := sg.Instance
	if c == nil || !c.Tracked || c.Template != "users" || c.Refused == 0 || math.Abs(c.RefusedShare()-0.6) > 0.1 {
		t.Fatalf("instance counts %+v, want user:1's, about 60 %% refused", c)
	}
	if sg.Health != HealthRefusing {
		t.Errorf("health %q of an instance refused %.0f %%, want refusing", sg.Health, 100*c.RefusedShare())
	}
	if sg2 := d.signals(d.w.Last(), "user:2"); sg2.Health != HealthOK || sg2.Instance == nil || sg2.Instance.Refused != 0 {
		t.Errorf("user:2: %+v, want ok", sg2)
	}
}

// A history keeps its last HistoryLen samples, oldest first, in memory that
// stops growing there; counts that go back start the rates over.
func TestSeriesBoundsAndRestarts(t *testing.T) {
	var s series
	const n = HistoryLen + 250
	for i := range n {
		s.keep(sample{t: int64(i)})
	}
	if len(s.samples) != HistoryLen || cap(s.samples) > 2*HistoryLen {
		t.Fatalf("%d samples kept (capacity %d), want %d", len(s.samples), cap(s.samples), HistoryLen)
	}
	if h := s.history(); h[0].At != n-HistoryLen || h[len(h)-1].At != n-1 {
		t.Errorf("history %d..%d, want %d..%d", h[0].At, h[len(h)-1].At, n-HistoryLen, n-1)
	}
	rate := func(permits, now int64) Limiter {
		return Limiter{Info: limitd.Info{Config: limiter.Config{Kind: limiter.KindSchedule, Rate: 100}},
			State: &limitd.WaitInfo{Permits: permits, Now: now, Started: true}}
	}
	var r series
	sec := int64(time.Second)
	r.signal(rate(0, sec))
	if sg, _ := r.signal(rate(50, 2*sec)); sg.GrantedPerS != 50 || sg.Utilization != 0.5 {
		t.Errorf("50 permits in 1 s: %+v", sg)
	}
	if sg, _ := r.signal(rate(3, 3*sec)); sg.GrantedPerS != 0 || sg.Span != 0 {
		t.Errorf("counts went back: %+v, want no rate", sg)
	}
	if sg, _ := r.signal(rate(13, 4*sec)); sg.GrantedPerS != 10 {
		t.Errorf("10 permits in the second after: %+v, want 10/s from the new start", sg)
	}
}
