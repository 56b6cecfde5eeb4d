package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
)

// keyState is what a key holds: its value ("" with ok false: none) and PTTL.
type keyState struct {
	v    string
	ok   bool
	pttl time.Duration
}

func readKeys(t *testing.T, rdb redis.UniversalClient, keys ...string) []keyState {
	t.Helper()
	out := make([]keyState, len(keys))
	for i, k := range keys {
		v, err := rdb.Get(t.Context(), k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		out[i] = keyState{v: v, ok: err == nil}
		if out[i].ok {
			if out[i].pttl, err = rdb.PTTL(t.Context(), k).Result(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// sameKeys compares two readings; a TTL may have run down by up to slack
// between them (a real server's clock moves).
func sameKeys(t *testing.T, what string, before, after []keyState, slack time.Duration) {
	t.Helper()
	for i := range before {
		b, a := before[i], after[i]
		if b.ok != a.ok || b.v != a.v {
			t.Errorf("%s: key %d changed: %q (exists %v) → %q (exists %v)", what, i, b.v, b.ok, a.v, a.ok)
			continue
		}
		if (b.pttl < 0) != (a.pttl < 0) || a.pttl > b.pttl || b.pttl-a.pttl > slack {
			t.Errorf("%s: key %d PTTL %v → %v", what, i, b.pttl, a.pttl)
		}
	}
}

// multiNames are the three limiters of the all-or-nothing tests: a
// schedule, a smooth limiter and a template instance (pattern "m-*").
type multiNames struct{ sched, smooth, inst, fresh string }

func multiSetup(t *testing.T, s *Store, n multiNames) {
	t.Helper()
	stPut(t, s, n.sched, stSched(1000, 1))
	stPut(t, s, n.smooth, stSmooth(10, 1))
	if _, err := s.PutTemplate(t.Context(), limitd.Template{ID: "m", Pattern: "m-*", Limiter: stSched(0.01, 1)}); err != nil {
		t.Fatal(err)
	}
	// Every limiter started; the instance owes its next permit for 100 s.
	stAcquire(t, s, n.sched, 1, limitd.Forever)
	stAcquire(t, s, n.smooth, 1, limitd.Forever)
	stAcquire(t, s, n.inst, 1, limitd.Forever)
}

// multiSuite: one of three limiters refuses and the other two (and it) are
// left exactly as they were; an instance the call would create is not; a
// check (permits 0) takes nothing; a granted call takes from each.
func multiSuite(t *testing.T, rdb redis.UniversalClient, s *Store, n multiNames, slack time.Duration) {
	ctx := t.Context()
	multiSetup(t, s, n)
	keys := []string{s.stateKey(n.sched), s.stateKey(n.smooth), s.instanceKey(n.inst), s.instanceKey(n.fresh)}

	// The instance refuses (it owes 100 s), the others would grant within
	// half a second: nothing changes.
	const half = 500 * time.Millisecond
	before := readKeys(t, rdb, keys...)
	md, err := s.AcquireAll(ctx, []limitd.MultiRequest{{Name: n.sched, Permits: 3}, {Name: n.smooth, Permits: 2}, {Name: n.inst, Permits: 1}}, half)
	if err != nil {
		t.Fatal(err)
	}
	if md.Granted || len(md.Decisions) != 3 || !md.Decisions[0].Granted || !md.Decisions[1].Granted || md.Decisions[2].Granted {
		t.Fatalf("refused call: %+v", md)
	}
	if d := md.Decisions[2]; d.RetryAfter <= 0 || !d.Instance {
		t.Errorf("the instance's refusal: %+v", d)
	}
	sameKeys(t, "after a refused call", before, readKeys(t, rdb, keys...), slack)

	// The refusal comes first, and a fresh instance is named: it is not
	// created.
	md, err = s.AcquireAll(ctx, []limitd.MultiRequest{{Name: n.inst, Permits: 1}, {Name: n.fresh, Permits: 1}, {Name: n.sched, Permits: 1}}, half)
	if err != nil || md.Granted || !md.Decisions[1].Granted {
		t.Fatalf("refused call with a fresh instance: %+v, %v", md, err)
	}
	sameKeys(t, "after a refused call naming a fresh instance", before, readKeys(t, rdb, keys...), slack)

	// A check refuses as a request would, and takes nothing either way.
	md, err = s.AcquireAll(ctx, []limitd.MultiRequest{{Name: n.sched, Permits: 1}, {Name: n.inst, Permits: 0}}, half)
	if err != nil || md.Granted || md.Decisions[1].Granted || md.Decisions[1].Permits != 0 {
		t.Fatalf("refused check: %+v, %v", md, err)
	}
	sameKeys(t, "after a refused check", before, readKeys(t, rdb, keys...), slack)

	// Granted: the schedule and the smooth limiter take their permits, the
	// checked instance is left as it was.
	md, err = s.AcquireAll(ctx, []limitd.MultiRequest{{Name: n.sched, Permits: 2}, {Name: n.smooth, Permits: 1}, {Name: n.inst, Permits: 0}}, limitd.Forever)
	if err != nil || !md.Granted {
		t.Fatalf("granted call: %+v, %v", md, err)
	}
	if md.Decisions[0].Permits != 2 || md.Decisions[2].Permits != 0 || !md.Decisions[2].Granted || md.Decisions[2].Delay <= 0 {
		t.Errorf("granted call's decisions: %+v", md.Decisions)
	}
	after := readKeys(t, rdb, keys...)
	if after[0].v == before[0].v || after[1].v == before[1].v {
		t.Errorf("a granted call left a limiter unchanged")
	}
	sameKeys(t, "the checked instance", before[2:], after[2:], slack)
	w, err := s.Wait(ctx, n.sched)
	if err != nil || w.Permits != 3 {
		t.Errorf("schedule's permits after the granted call: %+v, %v, want 3", w, err)
	}

	// An optional request (shadow mode) refuses without refusing the call,
	// and takes nothing.
	before = readKeys(t, rdb, keys...)
	md, err = s.AcquireAll(ctx, []limitd.MultiRequest{{Name: n.sched, Permits: 1}, {Name: n.inst, Permits: 1, Optional: true}}, half)
	if err != nil || !md.Granted || !md.Decisions[0].Granted || md.Decisions[1].Granted {
		t.Fatalf("call with an optional refusal: %+v, %v", md, err)
	}
	after = readKeys(t, rdb, keys...)
	if after[0].v == before[0].v {
		t.Errorf("the call with an optional refusal took nothing")
	}
	sameKeys(t, "the optional refused instance", before[2:], after[2:], slack)

	// Bad input and missing limiters: errors, nothing taken.
	before = readKeys(t, rdb, keys...)
	for _, c := range []struct {
		reqs  []limitd.MultiRequest
		field string
		is    error
	}{
		{[]limitd.MultiRequest{{Name: n.sched, Permits: 1}, {Name: n.sched, Permits: 1}}, "requests[1].name", nil},
		{[]limitd.MultiRequest{{Name: n.sched, Permits: 1}, {Name: "bad name", Permits: 1}}, "requests[1].name", nil},
		{[]limitd.MultiRequest{{Name: n.sched, Permits: -1}}, "requests[0].permits", nil},
		{[]limitd.MultiRequest{{Name: n.sched, Permits: 1}, {Name: n.smooth, Permits: 1 << 40}}, "requests[1].permits", nil},
		{nil, "requests", nil},
		{[]limitd.MultiRequest{{Name: n.sched, Permits: 1}, {Name: "nobody-here", Permits: 1}}, "", ErrNotFound},
	} {
		_, err := s.AcquireAll(ctx, c.reqs, limitd.Forever)
		var fe *limiter.FieldError
		switch {
		case c.is != nil && !errors.Is(err, c.is):
			t.Errorf("%+v: %v, want %v", c.reqs, err, c.is)
		case c.is == nil && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%+v: %v, want bad %s", c.reqs, err, c.field)
		}
		// A request's field is also told by its index, not only in text.
		var re *limiter.RequestError
		if got := errors.As(err, &re); got != strings.HasPrefix(c.field, "requests[") {
			t.Errorf("%+v: %v: a *limiter.RequestError: %v", c.reqs, err, got)
		} else if got && "requests["+strconv.Itoa(re.Index)+"]."+re.Field != c.field {
			t.Errorf("%+v: RequestError{Index: %d, Field: %q}, want %s", c.reqs, re.Index, re.Field, c.field)
		}
	}
	sameKeys(t, "after errors", before, readKeys(t, rdb, keys...), slack)
}

func TestAcquireAllMiniredis(t *testing.T) {
	rdb := stMiniredisFactory(t)(t)
	s := stStore(t, rdb)
	multiSuite(t, rdb, s, multiNames{"ma", "mb", "m-1", "m-2"}, 0)
}

func TestAcquireAllRedis(t *testing.T) {
	redistest.Require(t)
	rdb := redistest.Server(t).Client()
	for _, scriptsOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("scriptsOnly=%v", scriptsOnly), func(t *testing.T) {
			var opts []Option
			if scriptsOnly {
				opts = append(opts, withScriptsOnly())
			}
			s := stStore(t, rdb, opts...)
			multiSuite(t, rdb, s, multiNames{"ma", "mb", "m-1", "m-2"}, time.Second)
		})
	}
}

// On a cluster the three limiters live on three masters.
func TestAcquireAllCluster(t *testing.T) {
	redistest.Require(t)
	cl := redistest.Cluster(t)
	rdb := cl.Client()
	s := stStore(t, rdb)
	ctx := t.Context()
	// Names whose keys live on different masters (the fresh instance
	// anywhere).
	var names []string
	masters := map[string]bool{}
	for i := 0; len(names) < 3 && i < 1000; i++ {
		name := fmt.Sprintf("m-%d", i)
		if len(names) < 2 {
			name = fmt.Sprintf("c%d", i)
		}
		addr := cl.MasterOf(ctx, s.stateKey(name)).Addr()
		if !masters[addr] {
			masters[addr] = true
			names = append(names, name)
		}
	}
	if len(names) < 3 {
		t.Fatalf("no names on three masters: %v", names)
	}
	multiSuite(t, rdb, s, multiNames{names[0], names[1], names[2], "m-fresh"}, time.Second)

	t.Run("Restore", func(t *testing.T) { multiRestore(t, rdb, s, names[0]) })
	t.Run("Raced", func(t *testing.T) {
		// Three more names on three masters: the raced call's a, b and c.
		var raced []string
		masters := map[string]bool{}
		for i := 0; len(raced) < 3 && i < 1000; i++ {
			name := fmt.Sprintf("r%d", i)
			if addr := cl.MasterOf(ctx, s.stateKey(name)).Addr(); !masters[addr] {
				masters[addr] = true
				raced = append(raced, name)
			}
		}
		multiRaced(t, rdb, func(f func()) *Store { return stStore(t, rdb, withSpread(f)) }, raced[0], raced[1], raced[2])
	})
}

func TestAcquireAllRestoreMiniredis(t *testing.T) {
	rdb := stMiniredisFactory(t)(t)
	s := stStore(t, rdb)
	stPut(t, s, "r", stSched(1000, 1))
	stAcquire(t, s, "r", 1, limitd.Forever)
	if _, err := s.PutTemplate(t.Context(), limitd.Template{ID: "m", Pattern: "m-*", Limiter: stSched(1, 1)}); err != nil {
		t.Fatal(err)
	}
	multiRestore(t, rdb, s, "r")
}

// multiRestore: what a take on a cluster wrote is undone exactly when
// nobody used the limiter since (quiet), an instance it created deleted,
// and a key somebody used since is left as they left it. Template "m"
// (m-*) exists.
func multiRestore(t *testing.T, rdb redis.UniversalClient, s *Store, name string) {
	ctx := t.Context()
	tpl, err := s.templates.match(ctx, s, "m-r1")
	if err != nil || tpl == nil {
		t.Fatalf("template m: %v", err)
	}
	keys := []string{s.stateKey(name), s.instanceKey("m-r1")}
	for _, g := range []multiGroup{{req: limitd.MultiRequest{Name: name, Permits: 5}}, {req: limitd.MultiRequest{Name: "m-r1", Permits: 1}, tpl: tpl}} {
		before := readKeys(t, rdb, keys...)
		out := limitd.MultiDecision{Decisions: make([]limitd.Decision, 1)}
		granted, ws, err := s.takeGroup(ctx, []multiGroup{g}, limitd.Forever, &out)
		if err != nil || !granted || len(ws) != 1 {
			t.Fatalf("take on %s: %v, %+v, %v", g.req.Name, granted, ws, err)
		}
		if readKeys(t, rdb, keys...)[g.index].v == before[g.index].v && g.tpl == nil {
			t.Fatal("the take wrote nothing")
		}
		kept, err := s.restore(ctx, ws)
		if err != nil || kept != 0 {
			t.Fatalf("quiet restore of %s: kept %d, %v", g.req.Name, kept, err)
		}
		sameKeys(t, "after a quiet restore of "+g.req.Name, before, readKeys(t, rdb, keys...), time.Second)
	}

	// Somebody took a permit after the take: the key is left as they left it.
	out := limitd.MultiDecision{Decisions: make([]limitd.Decision, 1)}
	_, ws, err := s.takeGroup(ctx, []multiGroup{{req: limitd.MultiRequest{Name: name, Permits: 5}}}, limitd.Forever, &out)
	if err != nil {
		t.Fatal(err)
	}
	stAcquire(t, s, name, 1, limitd.Forever)
	mid := readKeys(t, rdb, keys...)
	kept, err := s.restore(ctx, ws)
	if err != nil || kept != 1 {
		t.Fatalf("raced restore: kept %d, %v", kept, err)
	}
	sameKeys(t, "after a raced restore", mid, readKeys(t, rdb, keys...), time.Second)
}

// multiRaced: on a cluster (or as on one), the dry run grants, another
// caller then takes c's only permit, so c refuses when taken: what a and b
// took is put back exactly, and c is as the other caller left it. mk makes
// the store with the hook given.
func multiRaced(t *testing.T, rdb redis.UniversalClient, mk func(afterCheck func()) *Store, a, b, c string) {
	ctx := t.Context()
	var s *Store
	var mid []keyState
	s = mk(func() {
		stAcquire(t, s, c, 1, 0)
		mid = readKeys(t, rdb, s.stateKey(c))
	})
	stPut(t, s, a, stSched(1000, 1))
	stPut(t, s, b, stSmooth(10, 1))
	stPut(t, s, c, stSched(0.01, 1)) // not started: one permit now, the next 100 s later
	stAcquire(t, s, a, 1, limitd.Forever)
	keys := []string{s.stateKey(a), s.stateKey(b)}
	before := readKeys(t, rdb, keys...)
	md, err := s.AcquireAll(ctx, []limitd.MultiRequest{{Name: a, Permits: 2}, {Name: b, Permits: 1}, {Name: c, Permits: 1}}, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if md.Granted || md.Unrestored != 0 || !md.Decisions[0].Granted || !md.Decisions[1].Granted || md.Decisions[2].Granted {
		t.Fatalf("raced call: %+v", md)
	}
	sameKeys(t, "a and b after the undo", before, readKeys(t, rdb, keys...), time.Second)
	sameKeys(t, "c after the raced call", mid, readKeys(t, rdb, s.stateKey(c)), time.Second)
	if w, err := s.Wait(ctx, a); err != nil || w.Permits != 1 {
		t.Errorf("a's permits after the undo: %+v, %v, want 1", w, err)
	}
}

func TestAcquireAllRacedMiniredis(t *testing.T) {
	rdb := stMiniredisFactory(t)(t)
	multiRaced(t, rdb, func(f func()) *Store { return stStore(t, rdb, withSpread(f)) }, "ra", "rb", "rc")
}

// Floors hold for AcquireAll: an instance whose state was lost (a failover
// that lost the write, an empty restart) does not grant again what the
// store saw granted; a refused call records no position of its own.
func TestAcquireAllFloors(t *testing.T) {
	rdb := stMiniredisFactory(t)(t)
	s := stStore(t, rdb)
	ctx := t.Context()
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "f", Pattern: "f-*", Limiter: stSched(1, 1)}); err != nil {
		t.Fatal(err)
	}
	stPut(t, s, "g", stSched(1, 1))
	md, err := s.AcquireAll(ctx, []limitd.MultiRequest{{Name: "f-1", Permits: 3}}, limitd.Forever)
	if err != nil || !md.Granted {
		t.Fatalf("first call: %+v, %v", md, err)
	}
	end := md.Decisions[0].Position // 3 s after the first permit
	if fl, ok := FloorOf(s, "f-1"); !ok || fl.Seen+fl.Ahead != end {
		t.Fatalf("floor after a granted call: %+v, %v, want the position %d", fl, ok, end)
	}
	if err := rdb.Del(ctx, s.instanceKey("f-1")).Err(); err != nil {
		t.Fatal(err)
	}
	md, err = s.AcquireAll(ctx, []limitd.MultiRequest{{Name: "f-1", Permits: 1}, {Name: "g", Permits: 1}}, limitd.Forever)
	if err != nil || !md.Granted {
		t.Fatalf("call after the loss: %+v, %v", md, err)
	}
	if d := md.Decisions[0]; d.Scheduled < end {
		t.Errorf("the lost instance scheduled its permit at %d, before the floor %d", d.Scheduled, end)
	}
	// g owes 1 s now; a refused call (g, then a fresh instance that would
	// grant) leaves the instance's floor unrecorded.
	md, err = s.AcquireAll(ctx, []limitd.MultiRequest{{Name: "g", Permits: 1}, {Name: "f-2", Permits: 1}}, 0)
	if err != nil || md.Granted || !md.Decisions[1].Granted {
		t.Fatalf("refused call: %+v, %v", md, err)
	}
	if fl, ok := FloorOf(s, "f-2"); ok {
		t.Errorf("a refused call recorded a floor for f-2: %+v", fl)
	}
}

// A check (permits 0) on a smooth limiter: refused while it owes more than
// max_wait, granted with the delay a caller would have, and never a change.
func TestAcquireAllCheckSmooth(t *testing.T) {
	m, rdb := redistest.Mini(t)
	m.SetTime(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s := stStore(t, rdb)
	stPut(t, s, "sm", stSmooth(1, 0)) // a metronome: one permit a second
	stAcquire(t, s, "sm", 1, limitd.Forever)
	stAcquire(t, s, "sm", 1, limitd.Forever) // Guava: it waits 1 s, and the next is free 2 s later
	before := readKeys(t, rdb, s.stateKey("sm"))
	md, err := s.AcquireAll(t.Context(), []limitd.MultiRequest{{Name: "sm", Permits: 0}}, 500*time.Millisecond)
	if err != nil || md.Granted || md.Decisions[0].RetryAfter != int64(1500*time.Millisecond) {
		t.Fatalf("check within 500ms: %+v, %v", md, err)
	}
	md, err = s.AcquireAll(t.Context(), []limitd.MultiRequest{{Name: "sm", Permits: 0}}, limitd.Forever)
	if err != nil || !md.Granted || md.Decisions[0].Delay != int64(2*time.Second) || md.Decisions[0].Permits != 0 {
		t.Fatalf("check without bound: %+v, %v", md, err)
	}
	sameKeys(t, "the checked smooth limiter", before, readKeys(t, rdb, s.stateKey("sm")), 0)
}

// A calendar window in an all-or-nothing call: the first call finds its
// window unknown, writes nothing, and the store sends the bounds and calls
// again; the answer carries the window's limit, and a refusal by another
// limiter leaves the window's count as it was.
func TestAcquireAllCalendarWindow(t *testing.T) {
	rdb := stMiniredisFactory(t)(t)
	s := stStore(t, rdb)
	l := int64(2)
	stPut(t, s, "cal", limiter.Config{Kind: limiter.KindWindow, Limit: &l, Period: "day", Zone: "Europe/Berlin"})
	stPut(t, s, "tight", stSched(1, 1))
	d, err := s.AcquireAll(t.Context(), []limitd.MultiRequest{{Name: "cal", Permits: 1}, {Name: "tight", Permits: 1}}, 0)
	if err != nil || !d.Granted || d.Decisions[0].Limit != 2 || d.Decisions[0].Wait != 1 {
		t.Fatalf("first call: %+v, %v", d, err)
	}
	before := readKeys(t, rdb, s.stateKey("cal"))
	d, err = s.AcquireAll(t.Context(), []limitd.MultiRequest{{Name: "cal", Permits: 1}, {Name: "tight", Permits: 1}}, 0)
	if err != nil || d.Granted || !d.Decisions[0].Granted || d.Decisions[1].Granted {
		t.Fatalf("refused by tight: %+v, %v", d, err)
	}
	sameKeys(t, "refused by tight", before, readKeys(t, rdb, s.stateKey("cal")), 0)
	if w, err := s.Wait(t.Context(), "cal"); err != nil || w.Limit != 2 {
		t.Errorf("wait: %+v, %v", w, err)
	}
}
