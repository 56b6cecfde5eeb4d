package store

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

// tripLog records the round trips a client makes: the commands of each, by
// name. With failTime, every TIME it sends is answered with an error, as
// if Redis' answer to it were lost, while the commands beside it run.
type tripLog struct {
	mu       sync.Mutex
	trips    [][]string
	failTime bool
}

func (l *tripLog) record(_ context.Context, cmds []redis.Cmder) {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name()
	}
	l.mu.Lock()
	l.trips = append(l.trips, names)
	l.mu.Unlock()
}

func (l *tripLog) failTimes(_ context.Context, cmds []redis.Cmder) {
	for _, c := range cmds {
		if tc, ok := c.(*redis.TimeCmd); ok && l.failTime {
			tc.SetErr(errors.New("ERR no answer (test)"))
		}
	}
}

// take returns the trips recorded since the last take.
func (l *tripLog) take() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.trips
	l.trips = nil
	return t
}

// hook is the client hook that records into l.
func (l *tripLog) hook() redistest.TripHook {
	return redistest.TripHook{Before: l.record, After: l.failTimes}
}

// A batch that mixes fixed windows and a limiter's acquires is one round
// trip: the fixed windows' TIME and INCRBY go in the pipeline of the
// limiter's call.
func TestFixedWindowMixedBatchOneRoundTrip(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	log := &tripLog{}
	rdb.AddHook(log.hook())
	s := stStore(t, rdb)
	stPut(t, s, "a", stSched(1e6, math.Inf(1)))
	f := &Fixed{Limit: 100, Period: time.Hour}
	reqs := []Request{
		{Name: "w", Permits: 2, Charge: true, Fixed: f},
		{Name: "a", Permits: 1},
		{Name: "v", Permits: 1, Charge: true, Fixed: f},
		{Name: "a", Permits: 1},
	}
	ctx := context.Background()
	// The first batch learns Redis' clock (by the script) and loads what
	// the limiter's call needs.
	for i, o := range s.AcquireMany(ctx, reqs) {
		if o.Err != nil {
			t.Fatalf("request %d: %v", i, o.Err)
		}
	}
	log.take()
	out := s.AcquireMany(ctx, reqs)
	for i, want := range []int64{4, 0, 2, 0} {
		if o := out[i]; o.Err != nil || !o.Granted || want > 0 && o.Count != want {
			t.Errorf("request %d: %+v, want granted, count %d", i, o, want)
		}
	}
	trips := log.take()
	if len(trips) != 1 {
		t.Fatalf("%d round trips %v, want 1", len(trips), trips)
	}
	counts := map[string]int{}
	for _, name := range trips[0] {
		counts[name]++
	}
	if counts["time"] != 1 || counts["incrby"] != 2 || counts["evalsha"]+counts["fcall"] != 1 {
		t.Errorf("the round trip's commands: %v; want a TIME, an INCRBY per counter and one acquire call", trips[0])
	}
}

// A store that gets no answer to its TIMEs cannot bound its estimate of
// Redis' clock: every call after one whose TIME got no answer is counted by
// the script, which reads Redis' TIME itself. Every hit is counted, once,
// in the window of Redis' clock its answer names, and each answer says the
// count its own hits made. On a real redis-server.
func TestFixedWindowWithoutTimeAnswers(t *testing.T) {
	redistest.Require(t)
	rdb := redistest.Server(t).Client()
	log := &tripLog{failTime: true}
	rdb.AddHook(log.hook())
	s := stStore(t, rdb)
	TrustFixedEstimate(s, time.Minute, time.Minute) // a busy machine's round trips too
	ctx := context.Background()
	f := &Fixed{Limit: 1000, Period: time.Hour}
	const hits = 20
	windows := map[int64]int64{} // window start (Unix ns) → hits the answers put there
	for i := range hits {
		o := s.AcquireMany(ctx, []Request{{Name: "t", Permits: 1, Charge: true, Fixed: f}})[0]
		if o.Err != nil {
			t.Fatalf("hit %d: %v", i, o.Err)
		}
		start := o.Position - int64(time.Hour)
		windows[start]++
		if o.Count != windows[start] || !o.Granted || o.Now < start || o.Now >= o.Position {
			t.Errorf("hit %d: %+v, want count %d in the window [%d, %d)", i, o.Decision, windows[start], start, o.Position)
		}
	}
	// The first call learns the clock by the script; the next counts by
	// INCRBY and loses its TIME; the next goes by the script again; …
	if n := FixedScripted(s); n != hits/2 {
		t.Errorf("%d calls by the script, want %d: the first, and every call after a lost TIME", n, hits/2)
	}
	for start, n := range windows {
		if got, err := rdb.Get(ctx, s.fixedKey("t", start)).Result(); err != nil || got != strconv.FormatInt(n, 10) {
			t.Errorf("window %d: count %q (%v), want %d", start, got, err, n)
		}
	}
}

// A user that may not run TIME cannot count fixed windows: the script reads
// TIME too. Every call fails, and nothing is counted.
func TestFixedWindowTimeDenied(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Server(t)
	srv.AddUser("u", "pw", "~*", "&*", "+@all", "-time")
	rdb := srv.UserClient("u", "pw")
	s := stStore(t, rdb)
	ctx := context.Background()
	f := &Fixed{Limit: 1000, Period: time.Hour}
	for i := range 3 {
		if o := s.AcquireMany(ctx, []Request{{Name: "t", Permits: 1, Charge: true, Fixed: f}})[0]; o.Err == nil {
			t.Errorf("call %d: %+v, want an error", i, o.Decision)
		}
	}
	if keys := srv.Client().Keys(ctx, s.prefix+":{t}:n:*").Val(); len(keys) != 0 {
		t.Errorf("keys %v counted without TIME", keys)
	}
}

// TestFixedWindowCountedOnce: a window's INCRBY whose reply did not come in
// time is not sent again, whatever the client's retries (as TestCallOnce
// shows for the scripts), nor is a call of lua/fixed.lua, which counts when
// the estimate of Redis' clock is not trusted. Redis is stopped (SIGSTOP)
// while a caller counts, through a client that would retry once after a
// 200 ms read timeout; once Redis resumes it runs what it received: the hit
// must be counted once.
func TestFixedWindowCountedOnce(t *testing.T) {
	// the longest round trip the estimate is trusted from: a busy
	// machine's, or none
	for name, rtt := range map[string]time.Duration{"estimate": time.Minute, "script": 0} {
		t.Run(name, func(t *testing.T) { fixedCountedOnce(t, rtt) })
	}
}

func fixedCountedOnce(t *testing.T, rtt time.Duration) {
	srv := redistest.Server(t)
	ctx := context.Background()
	rdb, err := NewClient("redis://" + srv.Addr() + "?read_timeout=200ms&max_retries=1&min_idle_conns=4")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	s := stStore(t, rdb)
	TrustFixedEstimate(s, rtt, time.Minute)
	f := &Fixed{Limit: 1e9, Period: 24 * time.Hour}
	hit := func() Outcome {
		return s.AcquireMany(ctx, []Request{{Name: "once", Permits: 1, Charge: true, Fixed: f}})[0]
	}
	// The estimate sampled and idle connections for a retry to take.
	var warm sync.WaitGroup
	for range 8 {
		warm.Go(func() {
			for range 4 {
				if o := hit(); o.Err != nil {
					t.Error(o.Err)
				}
			}
		})
	}
	warm.Wait()
	o := hit()
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	key := s.fixedKey("once", o.Position-int64(f.Period))
	count := func() int64 {
		n, err := rdb.Get(ctx, key).Int64()
		if err != nil {
			t.Fatalf("count of %s: %v", key, err)
		}
		return n
	}
	before := count()
	pid := stRedisPid(t, rdb)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if o := hit(); !errors.Is(o.Err, ErrUnavailable) {
		t.Errorf("a hit on a stopped Redis: %+v, want ErrUnavailable", o)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Read until the count has held for a few reads: Redis runs a call
	// written on a connection it had not yet accepted after a later read.
	got, held := count()-before, 0
	for deadline := time.Now().Add(5 * time.Second); held < 3 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		now := count() - before
		if now == got && now >= 1 {
			held++
		} else {
			held = 0
		}
		got = now
	}
	if got != 1 {
		t.Errorf("a hit whose reply timed out was counted %d times once Redis resumed, want 1", got)
	}
}

// TestFixedScriptLoadedWhereMissing: on a cluster, counted by lua/fixed.lua
// (one call per counter), a master that lost the script (a restart, SCRIPT
// FLUSH) has the script sent to it again, and only it: the calls the other
// masters ran are not sent again, so every hit counts once.
func TestFixedScriptLoadedWhereMissing(t *testing.T) {
	cl := redistest.Cluster(t)
	s := stStore(t, cl.Client())
	TrustFixedEstimate(s, 0, time.Minute) // every call by the script
	ctx := context.Background()
	f := &Fixed{Limit: 100, Period: time.Hour}
	names := []string{"ann", "bob", "cy", "dee", "eve", "flo"} // several slots
	var end int64                                              // the window's end
	charge := func() {
		t.Helper()
		reqs := make([]Request, len(names))
		for i, n := range names {
			reqs[i] = Request{Name: n, Permits: 1, Charge: true, Fixed: f}
		}
		for i, o := range s.AcquireManyWithin(ctx, reqs, 5*time.Second) {
			if o.Err != nil {
				t.Fatalf("%s: %v", names[i], o.Err)
			}
			if end == 0 {
				end = o.Position
			} else if o.Position != end {
				t.Skip("the hour turned during the test: the counts are of two windows")
			}
		}
	}
	charge() // the script on every master that holds a counter
	flushed := cl.MasterOf(ctx, s.fixedBase(names[0]))
	if flushed == nil {
		t.Fatal("no master for " + names[0])
	}
	if err := flushed.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	charge()
	counts, err := s.FixedCounts(ctx, names, f.Period)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range counts {
		if n != 2 {
			t.Errorf("%s: counted %d, want 2", names[i], n)
		}
	}
}
