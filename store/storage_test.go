package store

// Tests of the storage format of lua/lib.lua ("Storage" there) and of running
// the rate limiter's calls as Redis Functions (functions.go).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// stBackends runs fn on miniredis (text form, scripts) and on a redis-server
// (binary form, functions).
func stBackends(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, stMiniredisFactory(t)(t)) })
	t.Run("redis-server", func(t *testing.T) { fn(t, stServerFactory(t)(t)) })
}

// TestStoragePackedRoundTrip packs extreme values of every number of x with
// lib.lua's enc and reads them back with its dec and with decodeStored: exact,
// in both forms.
func TestStoragePackedRoundTrip(t *testing.T) {
	t.Parallel()
	const max53 = 1<<53 - 1
	// One row per case: params (schedule), params (smooth), state, totals,
	// each as in lib.lua.
	type row struct {
		sched  [6]float64  // whole frac den max_permits burst max_backlog
		smooth [10]float64 // whole frac den max_permits cap initial warm cooldown threshold slope
		state  [8]float64  // st ep org nx pc rem sto ls
		tot    [4]int64    // al id pm lt
	}
	rows := []row{
		{},
		{
			[6]float64{1e15, 1<<26 - 1, 1 << 26, 1 << 50, 1.1, 1 << 50},
			[10]float64{1e15, 1<<26 - 1, 1 << 26, 1 << 50, 1e15, 1e15, 1, 0.1 + 0.2, math.Nextafter(1, 2), 1e-300},
			[8]float64{1, max53, max53, -(1 << 52), -(1 << 51), 1<<26 - 1, 1e15, -(1 << 51)},
			[4]int64{math.MaxInt64, math.MinInt64, 1 << 53, -1},
		},
		{
			[6]float64{1, 0, 1, 1, limiter.MaxBurst, 0},
			[10]float64{3, 1, 3, 2, 0, 0, 0, 1 / 3.0, 2.5e-05, 123456.789e10},
			[8]float64{0, 1795262636000000, -max53, max53, -max53, 0, 0, max53},
			[4]int64{1<<32 - 1, 1 << 32, -(1 << 32), 1<<63 - 1<<32},
		},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		var w row
		for i := range w.sched {
			w.sched[i] = float64(r.Int64N(1 << 50))
		}
		w.sched[1], w.sched[2], w.sched[4] = float64(r.Int64N(1<<26)), float64(1+r.Int64N(1<<26)), 1+r.Float64()*100
		for i := range w.smooth {
			w.smooth[i] = float64(r.Int64N(1 << 50))
		}
		w.smooth[1], w.smooth[2], w.smooth[6] = float64(r.Int64N(1<<26)), float64(1+r.Int64N(1<<26)), float64(r.IntN(2))
		w.smooth[7], w.smooth[8], w.smooth[9] = r.Float64()*1e9, r.NormFloat64()*1e6, r.ExpFloat64()
		for i := range w.state {
			w.state[i] = float64(r.Int64N(1<<54) - 1<<53)
		}
		w.state[0], w.state[5] = float64(r.IntN(2)), float64(r.Int64N(1<<26))
		for i := range w.tot {
			w.tot[i] = int64(r.Uint64())
		}
		rows = append(rows, w)
	}
	var args []any
	for _, w := range rows {
		for _, x := range w.sched {
			args = append(args, strconv.FormatFloat(x, 'g', -1, 64))
		}
		for _, x := range w.smooth {
			args = append(args, strconv.FormatFloat(x, 'g', -1, 64))
		}
		for _, x := range w.state {
			args = append(args, strconv.FormatFloat(x, 'g', -1, 64))
		}
		for _, x := range w.tot {
			args = append(args, uint32(x), int32(x>>32))
		}
	}
	// Per row: x of a schedule and of a smooth limiter (code, format, version 7,
	// params, state, totals), then each unpacked again as %.17g text.
	script := LuaLib(t) + `
local function back(layout, s, n)
  local v = {dec(layout, s)}
  local out = {}
  for i = 1, n do out[i] = string.format('%.17g', v[i]) end
  return table.concat(out, ' ')
end
check_layouts()
local out = {}
local a = {}
for i = 1, #ARGV do a[i] = num(ARGV[i]) end
for i = 1, #a, 32 do
  -- code, version 7, the params from a[from..to], then state and totals
  local function x(code, from, to)
    local v = {code, FORMAT, 7}
    for k = from, to do v[#v + 1] = a[k] end
    -- state and totals in the order of STATE, RUN and REST: started
    -- epoch next pace rem, the totals' low parts, last, expires (epoch's
    -- value again), origin stored, their high parts
    for _, k in ipairs({16, 17, 19, 20, 21, 24, 26, 28, 30, 23, 17, 18, 22, 25, 27, 29, 31}) do
      v[#v + 1] = a[i + k]
    end
    return v
  end
  local x1 = enc(X_OF[1].fmt, unpack(x(1, i, i + 5)))
  local x2 = enc(X_OF[2].fmt, unpack(x(2, i + 6, i + 15)))
  for _, x in ipairs({x1, x2, back(X_OF[1].fmt, x1, 26), back(X_OF[2].fmt, x2, 30)}) do
    out[#out + 1] = x
  end
end
return out`
	stBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		v, err := rdb.Eval(t.Context(), script, nil, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		if len(v) != 4*len(rows) {
			t.Fatalf("%d results for %d rows", len(v), len(rows))
		}
		g := func(x float64) string { return strconv.FormatFloat(x, 'g', 17, 64) }
		for k, w := range rows {
			o := v[4*k : 4*k+4]
			if !isPackedText(o[0]) && (len(o[0]) != 144 || len(o[1]) != 168) {
				t.Errorf("row %d: packed lengths %d %d, want 144 168", k, len(o[0]), len(o[1]))
			}
			// Lua reads back what it wrote.
			var tail []string
			for _, i := range []int{0, 1, 3, 4, 5} { // st ep nx pc rem
				tail = append(tail, g(w.state[i]))
			}
			for _, x := range w.tot {
				tail = append(tail, g(float64(uint32(x))))
			}
			tail = append(tail, g(w.state[7]))                // ls
			tail = append(tail, g(w.state[1]))                // expires
			tail = append(tail, g(w.state[2]), g(w.state[6])) // org sto
			for _, x := range w.tot {
				tail = append(tail, g(float64(int32(x>>32))))
			}
			f := strconv.Itoa(packedFormat)
			want := [2][]string{{"1", f, "7"}, {"2", f, "7"}}
			for _, x := range w.sched {
				want[0] = append(want[0], g(x))
			}
			for _, x := range w.smooth {
				want[1] = append(want[1], g(x))
			}
			for i := range 2 {
				want[i] = append(want[i], tail...)
				if got := strings.Fields(o[2+i]); strings.Join(got, " ") != strings.Join(want[i], " ") {
					t.Errorf("row %d x %d: Lua reads back\n  %v\nwant\n  %v", k, i, got, want[i])
				}
			}
			// store reads them too.
			for i, kind := range []limiter.Kind{limiter.KindSchedule, limiter.KindSmooth} {
				st, ok, err := decodeStored(o[i])
				if err != nil || !ok {
					t.Fatalf("row %d: decodeStored %s: %v", k, kind, err)
				}
				sp := st.Params
				if st.Kind != kind || sp.Kind != kind || st.Version != 7 {
					t.Errorf("row %d: kind %s/%s version %d, want %s 7", k, st.Kind, sp.Kind, st.Version, kind)
				}
				gotState := [8]float64{0, float64(st.Epoch), float64(st.Origin), float64(st.Next), float64(st.Pace), float64(st.Rem), float64(st.Stored), float64(st.Last)}
				if st.Started {
					gotState[0] = 1
				}
				if gotState != w.state {
					t.Errorf("row %d %s: state %v, want %v", k, kind, gotState, w.state)
				}
				if got := [4]int64{st.Allocated, st.Idle, st.Permits, st.Lateness}; got != w.tot {
					t.Errorf("row %d %s: totals %v, want %v", k, kind, got, w.tot)
				}
				if kind == limiter.KindSchedule {
					if sp.Slice.Whole != int64(w.sched[0]) || sp.Slice.Frac != int64(w.sched[1]) || sp.Slice.Den != int64(w.sched[2]) ||
						sp.MaxPermits != int64(w.sched[3]) || sp.Burst != w.sched[4] || sp.MaxBacklog != int64(w.sched[5]) {
						t.Errorf("row %d: schedule params %+v, want %v", k, sp, w.sched)
					}
					continue
				}
				if sp.Slice.Whole != int64(w.smooth[0]) || sp.Slice.Frac != int64(w.smooth[1]) || sp.Slice.Den != int64(w.smooth[2]) ||
					sp.MaxPermits != int64(w.smooth[3]) || sp.Cap != int64(w.smooth[4]) || sp.Initial != int64(w.smooth[5]) ||
					sp.Warm != (w.smooth[6] == 1) || sp.Cooldown != w.smooth[7] || sp.Threshold != w.smooth[8] || sp.Slope != w.smooth[9] {
					t.Errorf("row %d: smooth params %+v, want %v", k, sp, w.smooth)
				}
			}
		}
	})
}

// TestStorageLayouts: what lua/layout.go derives from lib.lua's field groups
// and the kinds' rows (X_OF: the layouts, written out, and the parameters
// the scripts take) is what check_layouts computes from them in Lua, in both
// Luas (lua/layout_test.go checks the rows against limiter's kinds).
func TestStorageLayouts(t *testing.T) {
	t.Parallel()
	stBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		n, err := rdb.Eval(t.Context(), LuaLib(t)+"return check_layouts()", nil).Int()
		if err != nil || n != len(lua.Kinds()) {
			t.Fatalf("check_layouts: %d kinds, %v; want %d", n, err, len(lua.Kinds()))
		}
	})
}

// TestStorageParams puts limiters of many configs and checks that the
// parameters the scripts keep are limiter.Compile's, Stable included (lib.lua
// computes it from the slice rather than store it).
func TestStorageParams(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	var configs []limiter.Config
	rate := func() float64 {
		if r.IntN(3) == 0 {
			return []float64{limiter.MinRate, limiter.MaxRate, 3, 1100.5, 5000.0 / 60, 999_999_999.9}[r.IntN(6)]
		}
		return limiter.MinRate * math.Pow(10, 15*r.Float64())
	}
	for range 60 {
		c := limiter.Config{Kind: limiter.KindSchedule, Rate: rate()}
		if r.IntN(2) == 0 {
			c.Burst = limiter.B([]float64{1, 1.1, 3.7, limiter.Inf, limiter.MaxBurst}[r.IntN(5)])
		}
		if r.IntN(2) == 0 {
			c.MaxBacklog = limiter.D(time.Duration(r.Int64N(limiter.Horizon)))
		}
		configs = append(configs, c)
		s := limiter.Config{Kind: limiter.KindSmooth, Rate: rate()}
		switch r.IntN(3) {
		case 0:
			b := r.Float64() * limiter.MaxStoredSeconds
			s.MaxBurstSeconds = &b
		case 1:
			s.Warmup = limiter.D(time.Duration(1 + r.Int64N(int64(limiter.MaxStoredSeconds*1e9))))
			cf := 1 + r.Float64()*10
			s.ColdFactor = &cf
		}
		if r.IntN(3) == 0 {
			ip := r.Float64() * 1e6
			s.InitialPermits = &ip
		}
		configs = append(configs, s)
	}
	stBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		s := stStore(t, rdb)
		for i, c := range configs {
			norm, _, err := c.Normalize()
			if err != nil {
				t.Fatalf("config %d %+v: %v", i, c, err)
			}
			want, err := limiter.Compile(norm)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("p%d", i)
			stPut(t, s, name, c)
			st, ok, err := ReadStored(t.Context(), s, s.stateKey(name))
			if err != nil || !ok {
				t.Fatalf("%s: %v %v", name, ok, err)
			}
			if want.Burst > limiter.MaxBurst || want.Kind == limiter.KindSmooth {
				want.Burst = 0 // "inf" is stored as 0; smooth has none
			}
			if st.Params != want {
				t.Errorf("%s %+v:\n  stored %+v\n  want   %+v", name, norm, st.Params, want)
			}
		}
	})
}

// TestStorageLayout: a named limiter is a hash of kind, ver and cfg and a
// state key holding x; a template instance is x alone in a string key with a
// TTL, small enough for millions of them (MEMORY USAGE, the widest kind).
func TestStorageLayout(t *testing.T) {
	t.Parallel()
	rdb := stServerFactory(t)(t)
	s := stStore(t, rdb)
	ctx := t.Context()
	warm := limiter.Config{Kind: limiter.KindSmooth, Rate: 1100.5, Warmup: limiter.D(time.Second)}
	stPut(t, s, "w", warm)
	// An idle_ttl of an hour: without one, an instance settled (its stored
	// time full, about 1 s here) is dropped, and a busy machine may take
	// that long between the acquires and the reads below.
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "t", Pattern: "u:*", Limiter: warm, IdleTTL: limiter.D(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"w", "u:1"} {
		for range 3 {
			stAcquire(t, s, name, 1, limitd.Forever)
		}
	}
	m, err := rdb.HGetAll(ctx, s.limiterKey("w")).Result()
	if err != nil {
		t.Fatal(err)
	}
	fields := slices.Sorted(maps.Keys(m))
	if !slices.Equal(fields, []string{"cfg", "kind", "ver"}) {
		t.Errorf("named limiter: fields %v, want cfg kind ver", fields)
	}
	if x, err := rdb.Get(ctx, s.stateKey("w")).Result(); err != nil || len(x) != 168 {
		t.Errorf("named limiter: x of %d bytes (%v), want 168", len(x), err)
	}
	if ttl := rdb.PTTL(ctx, s.stateKey("w")).Val(); ttl != -1 {
		t.Errorf("named limiter's state: TTL %v, want none", ttl)
	}
	key := s.instanceKey("u:1")
	x, err := rdb.Get(ctx, key).Result()
	if err != nil || len(x) != 168 {
		t.Fatalf("instance: %d bytes (%v), want x of 168", len(x), err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
		t.Errorf("instance TTL %v, want one", ttl)
	}
	if n := rdb.MemoryUsage(ctx, key).Val(); n > 256 {
		t.Errorf("instance takes %d bytes of Redis memory, want ≤ 256", n)
	}
}

// TestStorageInstanceFlag: Decision.Instance and WaitInfo.Instance tell a
// template instance from a named limiter.
func TestStorageInstanceFlag(t *testing.T) {
	t.Parallel()
	stBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		s := stStore(t, rdb)
		ctx := t.Context()
		stPut(t, s, "u:named", stSched(100, 1))
		if _, err := s.PutTemplate(ctx, limitd.Template{ID: "t", Pattern: "u:*", Limiter: stSched(10, 1)}); err != nil {
			t.Fatal(err)
		}
		for name, inst := range map[string]bool{"u:named": false, "u:1": true} {
			if d := stAcquire(t, s, name, 1, limitd.Forever); d.Instance != inst {
				t.Errorf("Acquire(%s).Instance = %v, want %v", name, d.Instance, inst)
			}
			g, err := s.Grant(ctx, name, 2, limitd.Forever)
			if err != nil || g.Instance != inst {
				t.Errorf("Grant(%s).Instance = %v (%v), want %v", name, g.Instance, err, inst)
			}
			if w := stWait(t, s, name); w.Instance != inst {
				t.Errorf("Wait(%s).Instance = %v, want %v", name, w.Instance, inst)
			}
			for _, o := range s.AcquireMany(ctx, []Request{{Name: name, Permits: 1, MaxWait: limitd.Forever}}) {
				if o.Err != nil || o.Instance != inst {
					t.Errorf("AcquireMany(%s).Instance = %v (%v), want %v", name, o.Instance, o.Err, inst)
				}
			}
		}
		// An instance not created yet: Wait reports it without creating it.
		if w := stWait(t, s, "u:2"); !w.Instance || w.Started {
			t.Errorf("Wait(u:2) = %+v, want an instance not started", w)
		}
	})
}

// TestStorageOldFormat: a hash written by a limitd before the state key (its
// x in the hash, or a field per number) is no limiter to the rate scripts,
// and putting the limiter again replaces it whole.
func TestStorageOldFormat(t *testing.T) {
	t.Parallel()
	stBackends(t, func(t *testing.T, rdb redis.UniversalClient) {
		s := stStore(t, rdb)
		ctx := t.Context()
		if err := rdb.HSet(ctx, s.limiterKey("old"), "kind", "schedule", "whole", "1000000", "frac", "0", "den", "1",
			"ver", "1", "st", "1", "ep", "1", "nx", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, s.limiterKey("old2"), "kind", "smooth", "ver", "2", "cfg", "{}", "x", "2 2 1 0 1 5").Err(); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"old", "old2"} {
			if _, err := s.Acquire(ctx, name, 1, 0); !errors.Is(err, ErrNotFound) {
				t.Errorf("Acquire on an old hash %s: %v, want not found", name, err)
			}
			if _, created, err := s.Put(ctx, name, stSched(10, 1)); err != nil || !created {
				t.Fatalf("Put over the old hash %s: created %v, %v", name, created, err)
			}
			fields, err := rdb.HKeys(ctx, s.limiterKey(name)).Result()
			if slices.Sort(fields); err != nil || !slices.Equal(fields, []string{"cfg", "kind", "ver"}) {
				t.Errorf("%s put again: fields %v (%v), want cfg kind ver", name, fields, err)
			}
			stAcquire(t, s, name, 1, 0)
		}
	})
}

// ---- functions ----

// stCommandCalls returns the calls of each command since the last CONFIG
// RESETSTAT on every node, summed ("evalsha", "fcall", "function|load").
func stCommandCalls(t *testing.T, rdb redis.UniversalClient) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	out := map[string]int64{}
	err := stForEachNode(t.Context(), rdb, func(ctx context.Context, _ string, c redis.Cmdable) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for line := range strings.Lines(info) {
			name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
			out[name] += n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func stResetStats(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	if err := stForEachNode(t.Context(), rdb, func(ctx context.Context, _ string, c redis.Cmdable) error {
		return c.ConfigResetStat(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
}

func stFunctionFlush(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	if err := stForEachNode(t.Context(), rdb, func(ctx context.Context, _ string, c redis.Cmdable) error {
		return c.FunctionFlush(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
}

// stEveryCall runs every operation of the function library, lua.Library (and AcquireMany, and a
// batched Acquire) on limiter name, checking that each permit is due 1 ms
// after the previous one (the limiter is stSched(1000, 1), used by nothing
// else).
func stEveryCall(t *testing.T, s, batched *Store, name string, last *int64) {
	t.Helper()
	ctx := t.Context()
	next := func(what string, d limitd.Decision, err error) {
		t.Helper()
		if err != nil || !d.Granted {
			t.Fatalf("%s(%s) = %+v, %v", what, name, d, err)
		}
		if *last != 0 && d.Scheduled != *last+1e6 {
			t.Errorf("%s(%s): due +%d after the previous permit, want +1ms", what, name, d.Scheduled-*last)
		}
		*last = d.Scheduled
	}
	d, err := s.Acquire(ctx, name, 1, limitd.Forever)
	next("Acquire", d, err)
	o := s.AcquireMany(ctx, []Request{{Name: name, Permits: 1, MaxWait: limitd.Forever}})[0]
	next("AcquireMany", o.Decision, o.Err)
	d, err = batched.Acquire(ctx, name, 1, limitd.Forever)
	next("batched Acquire", d, err)
	g, err := s.Grant(ctx, name, 3, limitd.Forever)
	next("Grant", g.Decision, err)
	// Three permits, 1 ms apart; the last two are handed back and are due
	// again.
	if ok, err := s.Release(ctx, g, 2); err != nil || !ok {
		t.Fatalf("Release(%s) = %v, %v; want rewound", name, ok, err)
	}
	if w, err := s.Wait(ctx, name); err != nil || !w.Started {
		t.Fatalf("Wait(%s) = %+v, %v", name, w, err)
	}
	d, err = s.Acquire(ctx, name, 1, limitd.Forever)
	next("Acquire after Release", d, err)
	if _, err := s.Reset(ctx, name); err != nil {
		t.Fatalf("Reset(%s): %v", name, err)
	}
	*last = 0 // a new schedule
}

// TestFunctions: on Redis ≥ 7 the rate limiter's calls are FCALLs of the
// library, loaded on first use and again after FUNCTION FLUSH (every call
// recovers, a burst of callers loads it once); on miniredis they are scripts.
func TestFunctions(t *testing.T) {
	t.Parallel()
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		stTestFunctions(t, stServerFactory(t)(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("a cluster takes a few seconds to start")
		}
		stTestFunctions(t, stClusterFactory(t)(t))
	})
	t.Run("ring", func(t *testing.T) {
		t.Parallel()
		a, b := redistest.Server(t), redistest.Server(t)
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
		t.Cleanup(func() { _ = ring.Close() })
		s := stStore(t, ring)
		for i := range 8 { // on both shards
			name := fmt.Sprintf("r%d", i)
			stPut(t, s, name, stSched(1000, 1))
			var last int64
			stEveryCall(t, s, s, name, &last)
			stFunctionFlush(t, a.Client())
			stFunctionFlush(t, b.Client())
			stEveryCall(t, s, s, name, &last)
		}
		if s.fn.off.Load() {
			t.Errorf("the store gave functions up on a ring")
		}
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		rdb := stMiniredisFactory(t)(t)
		s := stStore(t, rdb)
		stPut(t, s, "a", stSched(1000, 1))
		var last int64
		stEveryCall(t, s, s, "a", &last)
		if !s.fn.off.Load() {
			t.Errorf("miniredis has no functions, yet the store still tries them")
		}
	})
}

func stTestFunctions(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	s := stStore(t, rdb)
	batched := New(rdb, WithPrefix(s.Prefix()), WithBatching(8))
	defer batched.Close()
	names := make([]string, 12)
	last := make([]int64, len(names))
	for i := range names {
		names[i] = fmt.Sprintf("f%d", i)
		stPut(t, s, names[i], stSched(1000, 1))
	}
	stResetStats(t, rdb)
	for i, n := range names {
		stEveryCall(t, s, batched, n, &last[i])
	}
	calls := stCommandCalls(t, rdb)
	// Only the limiters' Put (configure, not a function) and nothing else
	// runs as a script.
	if calls["fcall"] == 0 || calls["evalsha"] != 0 || calls["eval"] != 0 {
		t.Errorf("calls %v: want FCALLs only", calls)
	}
	if calls["function|load"] == 0 {
		t.Errorf("calls %v: the library was never loaded", calls)
	}
	if s.fn.off.Load() || batched.fn.off.Load() {
		t.Fatalf("the stores gave functions up")
	}

	// Every call recovers from FUNCTION FLUSH on every node, whichever
	// finds the library gone.
	for i, n := range names {
		stFunctionFlush(t, rdb)
		switch i % 4 {
		case 0:
			o := s.AcquireMany(ctx, []Request{{Name: n, Permits: 1, MaxWait: limitd.Forever}})[0]
			if o.Err != nil || last[i] != 0 && o.Scheduled != last[i]+1e6 {
				t.Fatalf("AcquireMany(%s) first after FUNCTION FLUSH = %+v", n, o)
			}
			last[i] = o.Scheduled
		case 1:
			if _, err := s.Wait(ctx, n); err != nil {
				t.Fatalf("Wait(%s) first after FUNCTION FLUSH: %v", n, err)
			}
		case 2:
			if _, err := s.Reset(ctx, n); err != nil {
				t.Fatalf("Reset(%s) first after FUNCTION FLUSH: %v", n, err)
			}
			last[i] = 0
		case 3:
			g, err := s.Grant(ctx, n, 2, limitd.Forever)
			if err != nil || last[i] != 0 && g.Scheduled != last[i]+1e6 {
				t.Fatalf("Grant(%s) first after FUNCTION FLUSH = %+v, %v", n, g, err)
			}
			stFunctionFlush(t, rdb)
			if ok, err := s.Release(ctx, g, 1); err != nil || !ok {
				t.Fatalf("Release(%s) first after FUNCTION FLUSH = %v, %v", n, ok, err)
			}
			last[i] = g.Scheduled
		}
		stEveryCall(t, s, batched, n, &last[i])
	}

	// A pipeline over every limiter (on every node of a cluster) finds the
	// library gone, loads it and runs again what failed.
	for range 2 {
		stFunctionFlush(t, rdb)
		reqs := make([]Request, len(names))
		for i, n := range names {
			reqs[i] = Request{Name: n, Permits: 1, MaxWait: limitd.Forever}
		}
		for i, o := range s.AcquireMany(ctx, reqs) {
			if o.Err != nil || last[i] != 0 && o.Scheduled != last[i]+1e6 {
				t.Fatalf("AcquireMany(%s) after FUNCTION FLUSH = %+v", names[i], o)
			}
			last[i] = o.Scheduled
		}
	}

	// A burst of callers that all find the library gone loads it once per
	// node, however many of them there are.
	stFunctionFlush(t, rdb)
	stResetStats(t, rdb)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			if d, err := s.Acquire(ctx, names[i%len(names)], 1, limitd.Forever); err != nil || !d.Granted {
				t.Errorf("Acquire after FUNCTION FLUSH: %+v, %v", d, err)
			}
		})
	}
	wg.Wait()
	clear(last) // the burst took permits nobody counted
	nodes := 1
	if _, ok := rdb.(*redis.ClusterClient); ok {
		nodes = 3
	}
	if calls := stCommandCalls(t, rdb); calls["function|load"] > int64(2*nodes) || calls["function|load"] == 0 {
		t.Errorf("64 callers after FUNCTION FLUSH loaded the library %d times on %d nodes", calls["function|load"], nodes)
	}

	// A store that runs scripts gives the same answers.
	scripts := New(rdb, WithPrefix(s.Prefix()), withScriptsOnly())
	stResetStats(t, rdb)
	for i, n := range names {
		stEveryCall(t, scripts, scripts, n, &last[i])
	}
	if calls := stCommandCalls(t, rdb); calls["fcall"] != 0 || calls["evalsha"] == 0 {
		t.Errorf("calls %v: want EVALSHAs only", calls)
	}
}

// TestFunctionsNoPerm: a user the ACL denies FCALL, or FUNCTION LOAD, gets
// scripts.
func TestFunctionsNoPerm(t *testing.T) {
	t.Parallel()
	srv := redistest.Server(t)
	admin := srv.Client()
	ctx := t.Context()
	for _, c := range []struct{ user, deny string }{{"nofcall", "-fcall"}, {"noload", "-function"}} {
		t.Run(c.user, func(t *testing.T) {
			if err := admin.Do(ctx, "ACL", "SETUSER", c.user, "on", ">pw", "~*", "&*", "+@all", c.deny).Err(); err != nil {
				t.Fatal(err)
			}
			if err := admin.FunctionFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: c.user, Password: "pw"})
			defer rdb.Close()
			s := stStore(t, rdb)
			stPut(t, s, "a", stSched(1000, 1))
			var last int64
			stEveryCall(t, s, s, "a", &last)
			if !s.fn.off.Load() {
				t.Errorf("the store still tries functions")
			}
			fresh := stStore(t, rdb)
			stPut(t, fresh, "b", stSched(1000, 1))
			o := fresh.AcquireMany(ctx, []Request{{Name: "b", Permits: 1}})
			if o[0].Err != nil || !o[0].Granted || !fresh.fn.off.Load() {
				t.Errorf("AcquireMany as %s: %+v, functions off %v", c.user, o[0], fresh.fn.off.Load())
			}
		})
	}
}

// TestStorageDenialWritesNothing: a denied request that changes no state
// writes nothing (nothing to replicate or persist either).
func TestStorageDenialWritesNothing(t *testing.T) {
	t.Parallel()
	rdb := stServerFactory(t)(t)
	s := stStore(t, rdb)
	for _, c := range []limiter.Config{stSched(1, 1), stSmooth(1, 0)} {
		name := string(c.Kind)
		stPut(t, s, name, c)
		stAcquire(t, s, name, 1, 0)
		stResetStats(t, rdb)
		for range 3 {
			if d := stAcquire(t, s, name, 1, 0); d.Granted {
				t.Fatalf("%s: granted %+v", name, d)
			}
		}
		if calls := stCommandCalls(t, rdb); calls["set"]+calls["setrange"] != 0 || calls["fcall"] != 3 {
			t.Errorf("%s: 3 denials called %v, want 3 FCALLs and no write", name, calls)
		}
		if d := stAcquire(t, s, name, 1, limitd.Forever); !d.Granted {
			t.Errorf("%s: not granted after the denials: %+v", name, d)
		}
		if calls := stCommandCalls(t, rdb); calls["set"]+calls["setrange"] != 1 {
			t.Errorf("%s: a grant called %v, want one SET or SETRANGE", name, calls)
		}
	}
}

// TestStorageLeanCarry: one acquire on a named schedule limiter rewrites only
// the low parts of its totals (acquire_one in lua/schedule.lua); one whose totals
// would reach 2^51 there carries into the high parts instead, exactly.
func TestStorageLeanCarry(t *testing.T) {
	t.Parallel()
	rdb := stServerFactory(t)(t)
	s := stStore(t, rdb)
	const low = 1 << 51
	stPut(t, s, "c", stSched(1000, 1))
	stAcquire(t, s, "c", 1, limitd.Forever)
	key := s.stateKey("c")
	// lows sets the low parts of the totals (al id pm lt) to ARGV and
	// returns the low and high parts, or only returns them without ARGV.
	lows := LuaLib(t) + `
check_layouts()
local v = {dec(X_OF[1].fmt, redis.call('GET', KEYS[1]))}
table.remove(v, 1) -- the code
table.remove(v, 1) -- the format
if #ARGV > 0 then
  for i = 1, 4 do v[12 + i] = tonumber(ARGV[i]) end
  redis.call('SET', KEYS[1], enc(X_OF[1].fmt, 1, FORMAT, unpack(v, 1, 24)))
end
return {v[13], v[14], v[15], v[16], v[20], v[21], v[22], v[23]}`
	parts := func(args ...any) []int64 {
		t.Helper()
		v, err := rdb.Eval(t.Context(), lows, []string{key}, args...).Int64Slice()
		if err != nil || len(v) != 8 {
			t.Fatalf("lows: %v, %v", v, err)
		}
		return v
	}
	for _, set := range [][4]int64{
		{7, 7, 7, 7},                           // no carry: the lean write
		{low - 1, 7, low - 1, low - 1},         // al, pm and lt carry
		{low - 1e6, low - 1, 0, low - 1},       // al reaches 2^51 exactly
		{1 << 32, 1 << 33, 1<<51 - 2, 1 << 40}, // pm reaches it
	} {
		parts(set[0], set[1], set[2], set[3])
		before, _, err := ReadStored(t.Context(), s, key)
		if err != nil {
			t.Fatal(err)
		}
		d := stAcquire(t, s, "c", 1, limitd.Forever)
		after, _, err := ReadStored(t.Context(), s, key)
		if err != nil {
			t.Fatal(err)
		}
		if after.Allocated != before.Allocated+1e6 || after.Permits != before.Permits+1 ||
			after.Lateness != before.Lateness+d.Lateness || after.Idle < before.Idle {
			t.Errorf("lows %v: totals %+v after %+v and %+v", set, after, before, d)
		}
		for i, lo := range parts()[:4] {
			if lo < 0 || lo >= low {
				t.Errorf("lows %v: total %d's low part is %d, want [0, 2^51)", set, i, lo)
			}
		}
	}
}
