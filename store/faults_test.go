package store

// Faults a shared schedule must survive (issue 11): state lost or rewound
// (floors.go), Redis time stepping back, a grant handed back twice, template
// instances piling up.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
)

// faultRun takes permits of name through s until its schedule runs a second
// ahead (100/s), calling snap a few grants in and fault at the end. It
// returns the furthest position seen before the fault and the permits
// granted after it whose scheduled start lies before that position: permits
// granted twice.
func faultRun(t *testing.T, s *Store, name string, grant bool, snap, fault func()) (furthest int64, twice int64) {
	t.Helper()
	ctx := t.Context()
	take := func() limitd.Decision {
		if grant {
			g, err := s.Grant(ctx, name, 5, limitd.Forever)
			if err != nil {
				t.Fatalf("Grant(%s): %v", name, err)
			}
			return g.Decision
		}
		d, err := s.Acquire(ctx, name, 5, limitd.Forever)
		if err != nil {
			t.Fatalf("Acquire(%s): %v", name, err)
		}
		return d
	}
	for i := range 20 { // 100 permits: a second of schedule
		if i == 5 {
			snap()
		}
		d := take()
		furthest = max(furthest, d.Position)
	}
	fault()
	for range 10 {
		d := take()
		if !d.Granted {
			t.Fatalf("not granted: %+v", d)
		}
		if d.Scheduled < furthest {
			// Permits scheduled before the position seen: given out twice.
			twice += min(d.Permits, (furthest-d.Scheduled+9_999_999)/10_000_000)
		}
	}
	return furthest, twice
}

// TestFloorFault loses a limiter's state mid-sequence (an empty restart: the
// keys gone, a named limiter put back by the boot file's keeper) or brings an
// older copy back (a failover that lost the last writes). With floors, no
// permit granted afterwards is scheduled before the furthest position seen;
// without (withFloorCap(0)) the schedule rewinds and grants again.
func TestFloorFault(t *testing.T) {
	stBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, c := range []limiter.Config{stSched(100, 1), stSmooth(100, 0)} {
			for _, fault := range []string{"rewind", "empty", "instance-empty", "instance-rewind"} {
				for _, grant := range []bool{false, true} {
					name := fmt.Sprintf("%s-%s-%v", c.Kind, fault, grant)
					t.Run(name, func(t *testing.T) {
						for _, floors := range []bool{true, false} {
							var opts []Option
							if !floors {
								opts = append(opts, withFloorCap(0))
							}
							s := stStore(t, rdb, opts...)
							ctx := t.Context()
							target, key := "n", s.stateKey("n")
							if fault == "instance-empty" || fault == "instance-rewind" {
								if _, err := s.PutTemplate(ctx, limitd.Template{ID: "t", Pattern: "i:*", Limiter: c}); err != nil {
									t.Fatal(err)
								}
								target, key = "i:1", s.instanceKey("i:1")
							} else {
								stPut(t, s, target, c)
							}
							var snap string
							_, twice := faultRun(t, s, target, grant, func() {
								snap = rdb.Get(ctx, key).Val()
							}, func() {
								switch fault {
								case "rewind", "instance-rewind":
									if err := rdb.Set(ctx, key, snap, 0).Err(); err != nil {
										t.Fatal(err)
									}
								case "empty":
									rdb.Del(ctx, s.stateKey(target), s.limiterKey(target))
									stPut(t, s, target, c)
								case "instance-empty":
									rdb.Del(ctx, key)
								}
							})
							if floors && twice != 0 {
								t.Errorf("floors on: %d permits granted twice", twice)
							}
							if !floors && twice == 0 {
								t.Errorf("floors off: no permit granted twice: the fault did not rewind the schedule (the test cannot fail)")
							}
							t.Logf("floors %v: %d permits granted twice", floors, twice)
						}
					})
				}
			}
		}
	})
}

// TestClockStepBackMiniredis steps Redis TIME back 60 s under a limiter with
// a debt: callers wait what the schedule owed, not the step, and no more
// than the rate is granted on the new clock.
func TestClockStepBackMiniredis(t *testing.T) {
	for _, c := range []limiter.Config{stSched(100, 1), stSmooth(100, 0)} {
		t.Run(string(c.Kind), func(t *testing.T) {
			m, rdb := redistest.Mini(t)
			s := stStore(t, rdb)
			T := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
			m.SetTime(T)
			stPut(t, s, "c", c)
			for range 10 { // 100 ms of debt
				stAcquire(t, s, "c", 1, limitd.Forever)
			}
			back := T.Add(-60 * time.Second)
			m.SetTime(back)
			d := stAcquire(t, s, "c", 1, 0)
			if d.Granted || time.Duration(d.Delay) > 100*time.Millisecond {
				t.Fatalf("after a 60 s step back: %+v, want a denial with at most the 100 ms owed", d)
			}
			// One second of the new clock, a caller every ms taking what it
			// may: at most the rate (100, and the one the step found due).
			var n int
			for ms := range 1000 {
				m.SetTime(back.Add(time.Duration(ms) * time.Millisecond))
				if d := stAcquire(t, s, "c", 1, 0); d.Granted {
					n++
					if d.Now != back.Add(time.Duration(ms)*time.Millisecond).UnixNano() {
						t.Fatalf("answer not on the new clock: now %d", d.Now)
					}
				}
			}
			if n < 90 || n > 101 {
				t.Errorf("%d permits in the second after the step, want about 100 (the rate)", n)
			}
			t.Logf("%s: delay after the step %v, %d permits in the next second", c.Kind, time.Duration(d.Delay), n)
		})
	}
}

// TestHandbackOnce: a grant handed back twice counts once.
func TestHandbackOnce(t *testing.T) {
	stBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		s := stStore(t, rdb)
		ctx := t.Context()
		stPut(t, s, "h", stSched(100, 1))
		g, err := s.Grant(ctx, "h", 10, limitd.Forever)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, false, false} {
			rewound, err := s.Release(ctx, g, 5)
			if err != nil || rewound != want {
				t.Fatalf("hand-back %d: rewound %v, %v; want %v", i, rewound, err, want)
			}
		}
		if w := stWait(t, s, "h"); w.Permits != 5 || w.Allocated != 50_000_000 {
			t.Errorf("after three hand-backs of 5 of 10: permits %d allocated %d, want 5 and 50ms", w.Permits, w.Allocated)
		}
		// Not rewound (another grant followed): counted as idle, once.
		g2, err := s.Grant(ctx, "h", 10, limitd.Forever)
		if err != nil {
			t.Fatal(err)
		}
		stAcquire(t, s, "h", 1, limitd.Forever)
		for range 3 {
			if rewound, err := s.Release(ctx, g2, 10); err != nil || rewound {
				t.Fatalf("hand-back of g2: %v, %v", rewound, err)
			}
		}
		if w := stWait(t, s, "h"); w.Permits != 6 || w.Allocated != 60_000_000 {
			t.Errorf("after three hand-backs of g2: %+v, want 6 permits and 60ms allocated", w)
		}
	})
}

// TestTemplateDefaultIdleTTL: instances of a template without idle_ttl get
// a finite TTL (DefaultIdleTTL after their debt), never shorter than their
// debt; after that time they are gone. 200,000 distinct names go through one
// store against a real redis-server; the store's floors stay bounded.
func TestTemplateDefaultIdleTTL(t *testing.T) {
	t.Parallel()
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	rdb := stServerFactory(t)(t)
	s := stStore(t, rdb)
	ctx := t.Context()
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "k", Pattern: "k:*", Limiter: stSched(10, 1)}); err != nil {
		t.Fatal(err)
	}
	reqs := make([]Request, 0, 2000)
	for i := 0; i < n; i += cap(reqs) {
		reqs = reqs[:0]
		for j := i; j < min(n, i+cap(reqs)); j++ {
			reqs = append(reqs, Request{Name: fmt.Sprintf("k:%d", j), Permits: 1, MaxWait: limitd.Forever})
		}
		for _, o := range s.AcquireMany(ctx, reqs) {
			if o.Err != nil || !o.Granted {
				t.Fatalf("acquire: %+v", o)
			}
		}
	}
	if c := FloorCountOf(s); c > DefaultFloorCap {
		t.Errorf("%d floors kept, cap %d", c, DefaultFloorCap)
	}
	// Every instance: a TTL of at most its debt (one slice, 100 ms) and
	// DefaultIdleTTL, and an eighth more (lua/lib.lua, Instance TTLs).
	limit := (limitd.DefaultIdleTTL + 100*time.Millisecond) * 9 / 8
	var keys int
	iter := rdb.Scan(ctx, 0, s.prefix+":{k:*}:i", 5000).Iterator()
	batch := make([]string, 0, 1000)
	check := func() {
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.PTTL(ctx, k)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range cmds {
			ttl := c.(*redis.DurationCmd).Val()
			if ttl <= 0 || ttl > limit {
				t.Fatalf("%s: TTL %v, want (0, %v]", batch[i], ttl, limit)
			}
		}
		keys += len(batch)
		batch = batch[:0]
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
			check()
		}
	}
	check()
	if keys != n {
		t.Errorf("%d instance keys, want %d", keys, n)
	}
	t.Logf("%d instances, every TTL ≤ %v; %d floors kept", keys, limit, FloorCountOf(s))
}

// TestTemplateIdleTTLExpiry (miniredis: FastForward): instances are gone once
// DefaultIdleTTL has passed after their debt; one that owes is kept at least
// until its debt is paid, an explicit idle_ttl too.
func TestTemplateIdleTTLExpiry(t *testing.T) {
	m, rdb := redistest.Mini(t)
	s := stStore(t, rdb)
	ctx := t.Context()
	debtCfg := limiter.Config{Rate: 1, Burst: limiter.B(1), MaxReserve: limiter.D(time.Hour)}
	for _, tp := range []limitd.Template{
		{ID: "a", Pattern: "a:*", Limiter: stSched(10, 1)},
		{ID: "b", Pattern: "b:*", Limiter: stSmooth(10, 1)},
		{ID: "d", Pattern: "d:*", Limiter: debtCfg},
		{ID: "e", Pattern: "e:*", Limiter: debtCfg, IdleTTL: durp(time.Second)},
	} {
		if _, err := s.PutTemplate(ctx, tp); err != nil {
			t.Fatal(err)
		}
	}
	var reqs []Request
	for i := range 500 {
		reqs = append(reqs, Request{Name: fmt.Sprintf("a:%d", i), Permits: 1, MaxWait: limitd.Forever},
			Request{Name: fmt.Sprintf("b:%d", i), Permits: 1, MaxWait: limitd.Forever})
	}
	reqs = append(reqs, Request{Name: "d:1", Permits: 1800, MaxWait: limitd.Forever}, Request{Name: "e:1", Permits: 1800, MaxWait: limitd.Forever})
	for _, o := range s.AcquireMany(ctx, reqs) {
		if o.Err != nil || !o.Granted {
			t.Fatalf("acquire: %+v", o)
		}
	}
	// The owing instances: 30 minutes of debt.
	for _, k := range []string{s.instanceKey("d:1"), s.instanceKey("e:1")} {
		if ttl := m.TTL(k); ttl < 30*time.Minute {
			t.Errorf("%s: TTL %v while it owes 30m", k, ttl)
		}
	}
	m.FastForward(limitd.DefaultIdleTTL + time.Second)
	for i := range 500 {
		for _, k := range []string{s.instanceKey(fmt.Sprintf("a:%d", i)), s.instanceKey(fmt.Sprintf("b:%d", i))} {
			if m.Exists(k) {
				t.Fatalf("%s still exists %v after its debt", k, limitd.DefaultIdleTTL)
			}
		}
	}
	for _, k := range []string{s.instanceKey("d:1"), s.instanceKey("e:1")} {
		if !m.Exists(k) {
			t.Errorf("%s dropped while it owes", k)
		}
	}
	m.FastForward(30*time.Minute + limitd.DefaultIdleTTL)
	if m.Exists(s.instanceKey("d:1")) || m.Exists(s.instanceKey("e:1")) {
		t.Errorf("owing instances kept past their debt and idle TTL")
	}
}

func durp(d time.Duration) *limiter.Duration { v := limiter.Duration(d); return &v }

// TestOldLayout: an x of an earlier format is read and written back in the
// current one (FORMAT in lua/lib.lua): format 4 (expires, 7 bytes, at the
// end rather than right after last), format 3 (137 bytes for a schedule
// limiter, format 4 without expires) with expires 0, format 2 (136 bytes,
// nor the format byte) likewise, format 1 (129 bytes, nor last) with last 0
// too. An x of a format the scripts do not know is an error, not read.
func TestOldLayout(t *testing.T) {
	rdb := stServerFactory(t)(t)
	s := stStore(t, rdb)
	ctx := context.Background()
	stPut(t, s, "o", stSched(100, 1))
	stAcquire(t, s, "o", 1, limitd.Forever)
	x := rdb.Get(ctx, s.stateKey("o")).Val()
	if len(x) != 144 || x[1] != packedFormat {
		t.Fatalf("x of %d bytes, format %d", len(x), x[1])
	}
	const lastAt, expiresAt = 100, 107                                                       // last's offset and expires'
	x4 := x[:1] + "\x04" + x[2:expiresAt] + x[expiresAt+7:] + "\x01\x02\x03\x04\x05\x06\x07" // expires 0x07…01
	for i, old := range []string{
		x4,                                       // format 4: expires at the end
		x4[:137],                                 // format 3: no expires
		x4[:1] + x4[2:137],                       // format 2: nor the format byte
		x4[:1] + x4[2:lastAt] + x4[lastAt+7:137], // format 1: nor last
	} {
		rdb.Set(ctx, s.stateKey("o"), old, 0)
		d := stAcquire(t, s, "o", 1, limitd.Forever)
		if !d.Granted || d.Scheduled-d.Now > int64(i+1)*10_000_000 { // one permit ahead per acquire
			t.Errorf("acquire on %d bytes: %+v", len(old), d)
		}
		x := rdb.Get(ctx, s.stateKey("o")).Val()
		if len(x) != 144 || x[1] != packedFormat {
			t.Errorf("x of %d bytes rewritten as %d bytes of format %d, want 144 of %d", len(old), len(x), x[1], packedFormat)
			continue
		}
		want := "\x00\x00\x00\x00\x00\x00\x00" // expires: none before
		if i == 0 {
			want = "\x01\x02\x03\x04\x05\x06\x07" // format 4's, moved
		}
		if got := x[expiresAt : expiresAt+7]; got != want {
			t.Errorf("x of %d bytes rewritten with expires % x, want % x", len(old), got, want)
		}
	}
	x = rdb.Get(ctx, s.stateKey("o")).Val()
	unknown := x[:1] + string(rune(packedFormat+1)) + x[2:]
	rdb.Set(ctx, s.stateKey("o"), unknown, 0)
	var ue *UnavailableError
	if d, err := s.Acquire(ctx, "o", 1, limitd.Forever); !errors.As(err, &ue) || ue.Condition != "UNKNOWN LAYOUT" {
		t.Errorf("acquire on an x of an unknown format: %+v, %v; want the condition UNKNOWN LAYOUT", d, err)
	}
	if _, err := s.Wait(ctx, "o"); err == nil {
		t.Errorf("peek on an x of an unknown format: no error")
	}
	if got := rdb.Get(ctx, s.stateKey("o")).Val(); got != unknown {
		t.Errorf("an x of an unknown format was rewritten")
	}
}

// TestFloorForgotten: a Delete, or a Put replacing a limiter with one of
// another kind, forgets the name's floor: the new schedule starts now, not
// where the old one stood.
func TestFloorForgotten(t *testing.T) {
	m, rdb := redistest.Mini(t)
	s := stStore(t, rdb)
	ctx := t.Context()
	m.SetTime(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	for _, change := range []string{"delete", "kind"} {
		stPut(t, s, "f", stSched(10, 1))
		stAcquire(t, s, "f", 100, limitd.Forever) // 10 s ahead
		if _, ok := s.floors.get("f"); !ok {
			t.Fatal("no floor after an acquire")
		}
		if change == "delete" {
			if err := s.Delete(ctx, "f"); err != nil {
				t.Fatal(err)
			}
			stPut(t, s, "f", stSched(10, 1))
		} else {
			stPut(t, s, "f", stSmooth(10, 0))
		}
		if _, ok := s.floors.get("f"); ok {
			t.Errorf("%s: the floor is still kept", change)
		}
		if d := stAcquire(t, s, "f", 1, 0); !d.Granted || d.Start != d.Now {
			t.Errorf("%s: first acquire of the new limiter %+v, want one at once", change, d)
		}
		if err := s.Delete(ctx, "f"); err != nil {
			t.Fatal(err)
		}
	}
	// A Put of the same kind keeps the schedule, and so the floor.
	stPut(t, s, "g", stSched(10, 1))
	stAcquire(t, s, "g", 100, limitd.Forever)
	stPut(t, s, "g", stSched(20, 1))
	if _, ok := s.floors.get("g"); !ok {
		t.Errorf("a same-kind Put dropped the floor")
	}
}

// TestCallOnce: a call whose reply did not come in time is not sent again,
// whatever the client's retries. Redis is stopped (SIGSTOP) while callers
// acquire, through a client that would retry once after a 200 ms read
// timeout; once Redis resumes it runs what it received. Each caller's
// acquire must have run once, not twice (nor not at all: the call was
// sent): directly, and in a batch.
func TestCallOnce(t *testing.T) {
	srv := redistest.Server(t)
	ctx := context.Background()
	for _, callers := range []int{1, 2} { // 2: the second goes out in a batch
		rdb, err := NewClient("redis://" + srv.Addr() + "?read_timeout=200ms&max_retries=1&min_idle_conns=4")
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		s := stStore(t, rdb, WithBatching(8))
		name := fmt.Sprintf("once%d", callers)
		if _, _, err := s.Put(ctx, name, limiter.Config{Rate: 1e6, Burst: limiter.B(limiter.Inf)}); err != nil {
			t.Fatal(err)
		}
		permits := func() int64 {
			st, ok, err := ReadStored(ctx, s, s.stateKey(name))
			if err != nil || !ok {
				t.Fatalf("state of %s: %v, %v", name, ok, err)
			}
			return st.Permits
		}
		// Idle connections for a retry to take, in the pool of single calls
		// and in that of batches (a connection made while Redis is stopped
		// would not get the call out at all).
		var warm sync.WaitGroup
		for range 16 {
			warm.Go(func() {
				for range 8 {
					if _, err := s.Acquire(ctx, name, 1, limitd.Forever); err != nil {
						t.Error(err)
					}
				}
			})
		}
		warm.Wait()
		before := permits()
		pid := stRedisPid(t, rdb)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range callers {
			if i > 0 {
				time.Sleep(20 * time.Millisecond) // the first is in flight: the next is batched
			}
			wg.Go(func() {
				if _, err := s.Acquire(ctx, name, 1, limitd.Forever); !errors.Is(err, ErrUnavailable) {
					t.Errorf("acquire on a stopped Redis: %v, want ErrUnavailable", err)
				}
			})
		}
		wg.Wait()
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// Redis runs what it received as it polls its connections again: a
		// call written on a connection it had not yet accepted is run after
		// a read sent on an older one since. So read until the count has
		// reached the callers' and held for a few reads (a call sent twice,
		// queued before the resume too, would be run by then).
		got, held := permits()-before, 0
		for deadline := time.Now().Add(5 * time.Second); held < 3 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			now := permits() - before
			if now == got && now >= int64(callers) {
				held++
			} else {
				held = 0
			}
			got = now
		}
		if got != int64(callers) {
			t.Errorf("%d callers' acquires that timed out took %d permits once Redis resumed, want %d (one each)", callers, got, callers)
		}
	}
}

// stRedisPid is the process id of the redis-server rdb talks to.
func stRedisPid(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatal("no process_id in INFO server")
	return 0
}

// TestFloorQueuedProcesses: three processes (stores), 16 callers each, keep
// a 50/s schedule 0.96 s ahead of the clock, every caller asking again when
// its slot comes, so that each process's callers hold a block of slots in
// turn. Redis then restarts empty at the start of process 0's block and is
// back after 0.4 s, once that block has passed: the first caller back is
// process 0's, whose floor (the end of its block) lies behind the clock,
// while processes 1 and 2 hold slots ahead of it. The fresh schedule must
// not grant those slots again (Redis time driven with miniredis SetTime).
func TestFloorQueuedProcesses(t *testing.T) {
	for _, inst := range []bool{false, true} {
		t.Run(map[bool]string{false: "named", true: "instance"}[inst], func(t *testing.T) {
			m, rdb := redistest.Mini(t)
			ctx := t.Context()
			const procs, workers, slice = 3, 16, 20 * time.Millisecond
			open := func() *Store {
				s := New(rdb, WithPrefix("q"))
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			keeper := open() // limitd serve's boot file: puts the limiter back
			cfg, name := stSched(50, 1), "q"
			boot := func() {
				if inst {
					if _, err := keeper.PutTemplate(ctx, limitd.Template{ID: "t", Pattern: "q:*", Limiter: cfg}); err != nil {
						t.Fatal(err)
					}
					name = "q:1"
					return
				}
				stPut(t, keeper, name, cfg)
			}
			T0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			m.SetTime(T0)
			boot()
			st := make([]*Store, procs)
			for i := range st {
				st[i] = open()
			}
			type caller struct {
				proc int
				due  time.Time
			}
			cs := make([]*caller, 0, procs*workers)
			for p := range procs {
				for range workers {
					cs = append(cs, &caller{proc: p, due: T0})
				}
			}
			type grant struct {
				proc         int
				sched, start int64
			}
			var before, after []grant
			// next is the caller due first (the first of equals in cs order).
			next := func() *caller {
				c := cs[0]
				for _, d := range cs[1:] {
					if d.due.Before(c.due) {
						c = d
					}
				}
				return c
			}
			take := func(c *caller, into *[]grant) {
				m.SetTime(c.due)
				d := stAcquire(t, st[c.proc], name, 1, limitd.Forever)
				*into = append(*into, grant{c.proc, d.Scheduled, d.Start})
				c.due = time.Unix(0, d.Start)
			}
			queue := time.Duration(procs*workers) * slice
			// Three rounds of the queue, then on to the start of a block of
			// process 0: the fault comes when its first caller is due.
			var fault time.Time
			for c := next(); ; c = next() {
				if !c.due.Before(T0.Add(3*queue)) && c.proc == 0 && before[len(before)-1].proc != 0 {
					fault = c.due
					break
				}
				take(c, &before)
			}
			// The restart: every key gone; the boot file put back; callers
			// due meanwhile ask again once it is back, the earliest first.
			m.FlushAll()
			back := fault.Add(400 * time.Millisecond)
			m.SetTime(back)
			boot()
			for _, c := range cs {
				if c.due.Before(back) {
					c.due = back.Add(c.due.Sub(fault) / 1000) // in the order they were due
				}
			}
			first := next()
			fl, ok := st[first.proc].floors.get(name)
			if !ok || fl.Seen+fl.Ahead >= back.UnixNano() || first.proc != 0 {
				t.Fatalf("the first caller back is process %d with floor %+v (ok %v): want process 0's, behind the clock at %d",
					first.proc, fl, ok, back.UnixNano())
			}
			var furthest int64
			for _, g := range before {
				furthest = max(furthest, g.sched)
			}
			if furthest < back.UnixNano()+int64(slice) {
				t.Fatalf("no slot granted before the restart lies ahead of the clock when it is back: the test cannot fail")
			}
			for c := next(); c.due.Before(back.Add(2 * queue)); c = next() {
				take(c, &after)
			}
			var twice int
			for _, g := range after {
				if g.sched <= furthest {
					twice++
					if twice <= 3 {
						t.Errorf("process %d granted the slot %v after the restart, at or before the furthest granted before it (%v)",
							g.proc, time.Duration(g.sched-fault.UnixNano()), time.Duration(furthest-fault.UnixNano()))
					}
				}
			}
			if twice > 0 {
				t.Errorf("%d of %d permits granted after the restart were granted before it too", twice, len(after))
			}
			// And the schedule goes on at the rate: one slot a slice.
			for i := 1; i < len(after); i++ {
				if d := after[i].sched - after[i-1].sched; d != int64(slice) {
					t.Fatalf("after the restart, slots %d and %d are %v apart, want %v", i-1, i, time.Duration(d), slice)
				}
			}
			t.Logf("%d permits before the restart, the furthest %v after it; the first after it at %v (back at %v); %d after",
				len(before), time.Duration(furthest-fault.UnixNano()), time.Duration(after[0].sched-fault.UnixNano()),
				time.Duration(back.Sub(fault)), len(after))
		})
	}
}
