package store_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// TestInstructionsPerDecision counts the instructions redis-server executes
// per decision (valgrind's callgrind, on a private redis-server started
// here), for limitd's paths and for a redis_rate that writes. Instruction
// counts hardly move with the machine's load, unlike times (redis-server's
// periodic tasks, which run during a count, add a few percent on a busy
// machine), so they are how the scripts' cost is compared across changes on
// a shared machine. It runs
// only when asked (it takes half a minute, and valgrind):
//
//	LIMITD_CALLGRIND=1 go test -count=1 -run TestInstructionsPerDecision -v ./store/
//
// Every figure is redis-server's whole work for the call (reading the
// command, the script, the reply), divided by the decisions it made: a
// batch of 64 counts 64. The test fails if an instance decision costs more
// than 1.24× a named limiter's (known, new, or batched), a script (EVAL)
// more than 2.45× the same call as a function or 2.05× a writing redis_rate's,
// a window instance's charge more than 1.3× a schedule instance's
// acquire (alone or batched), or a fixed window's count (store.Fixed) more
// than the Envoy reference's INCRBY and EXPIRE.
func TestInstructionsPerDecision(t *testing.T) {
	if os.Getenv("LIMITD_CALLGRIND") != "1" {
		t.Skip("set LIMITD_CALLGRIND=1 to count redis-server's instructions per decision (valgrind)")
	}
	for _, bin := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not installed: apt-get install -y valgrind redis-server", bin)
		}
	}
	cg := startCallgrindRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: cg.Addr(), ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	cfg := limiter.Config{Rate: 1e6, Burst: limiter.B(math.Inf(1))}
	s := store.New(rdb, store.WithPrefix("cg"))
	// Round trips to a redis-server under valgrind are slow, and slower
	// still the first time a path is instrumented: the fixed windows'
	// estimate of Redis' clock is trusted from them, so that they take
	// the path without a script.
	store.TrustFixedEstimate(s, time.Minute, time.Hour)
	eval := store.New(rdb, store.WithPrefix("cg"), store.WithScriptsOnly())
	if _, _, err := s.Put(ctx, "hot", cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "k", Pattern: "k:*", Limiter: cfg}); err != nil {
		t.Fatal(err)
	}
	// A window template as a rate limit service's rule makes one (a minute,
	// a limit no test reaches), charged as Service.Count charges.
	wlimit := int64(4e9)
	wcfg := limiter.Config{Kind: limiter.KindWindow, Limit: &wlimit, Period: "1m"}
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "w", Pattern: "w:*", Limiter: wcfg}); err != nil {
		t.Fatal(err)
	}
	named := make([]string, 64)
	for i := range named {
		named[i] = "n:" + strconv.Itoa(i)
		if _, _, err := s.Put(ctx, named[i], cfg); err != nil {
			t.Fatal(err)
		}
	}
	known := func(i int) string { return "k:" + strconv.Itoa(i%64) }
	fresh := 0
	newKey := func(int) string { fresh++; return "k:new" + strconv.Itoa(fresh) }
	one := func(st *store.Store, key func(int) string) func(int) int {
		return func(i int) int {
			if d, err := st.Acquire(ctx, key(i), 1, 0); err != nil || !d.Granted {
				t.Fatalf("acquire %s: %+v, %v", key(i), d, err)
			}
			return 1
		}
	}
	batch := func(key func(int) string) func(int) int {
		return func(i int) int {
			reqs := make([]store.Request, 64)
			for j := range reqs {
				reqs[j] = store.Request{Name: key(i*64 + j), Permits: 1}
			}
			for _, o := range s.AcquireMany(ctx, reqs) {
				if o.Err != nil || !o.Granted {
					t.Fatalf("batch: %+v", o)
				}
			}
			return len(reqs)
		}
	}
	charge := func(key func(int) string) func(int) int {
		return func(i int) int {
			if d, err := s.Charge(ctx, key(i), 1); err != nil || !d.Granted || !d.Window {
				t.Fatalf("charge %s: %+v, %v", key(i), d, err)
			}
			return 1
		}
	}
	charges := func(key func(int) string) func(int) int {
		return func(i int) int {
			reqs := make([]store.Request, 64)
			for j := range reqs {
				reqs[j] = store.Request{Name: key(i*64 + j), Permits: 1, Charge: true}
			}
			for _, o := range s.AcquireMany(ctx, reqs) {
				if o.Err != nil || !o.Granted || !o.Window {
					t.Fatalf("charges: %+v", o)
				}
			}
			return len(reqs)
		}
	}
	wKnown := func(i int) string { return "w:" + strconv.Itoa(i%1024) }
	// The Envoy reference server's counting: INCRBY and EXPIRE per
	// descriptor, in one pipeline.
	incr := func(key func(int) string) func(int) int {
		return func(i int) int {
			p := rdb.Pipeline()
			k := "ref:" + key(i)
			incr := p.IncrBy(ctx, k, 1)
			p.Expire(ctx, k, time.Minute)
			if _, err := p.Exec(ctx); err != nil || incr.Val() < 1 {
				t.Fatalf("INCRBY+EXPIRE: %v", err)
			}
			return 1
		}
	}
	for i := range 1024 { // the window instances and the reference's keys exist
		charge(wKnown)(i)
		incr(wKnown)(i)
	}
	rr := redis_rate.NewLimiter(rdb)
	warm := true // while warming up, check that redis_rate writes (outside the counts)
	peer := func(key func(int) string) func(int) int {
		return func(i int) int {
			k := key(i)
			var before string
			if warm {
				before = rdb.Get(ctx, "rate:"+k).Val()
			}
			if r, err := rr.Allow(ctx, k, redis_rate.PerSecond(int(cfg.Rate))); err != nil || r.Allowed != 1 {
				t.Fatalf("redis_rate: %+v, %v", r, err)
			}
			if warm && rdb.Get(ctx, "rate:"+k).Val() == before {
				t.Fatalf("redis_rate left its key unchanged at %g/s: it did not decide", cfg.Rate)
			}
			return 1
		}
	}
	// A rate_limit rule's window under the reference's counting: INCRBY in
	// a pipeline with a TIME (store.Fixed), an hour so that no count here
	// crosses a window's end and sets its expiry.
	fixed := func(key func(int) string) func(int) int {
		f := &store.Fixed{Limit: 4e9, Period: time.Hour}
		return func(i int) int {
			scripted := store.FixedScripted(s)
			o := s.AcquireMany(ctx, []store.Request{{Name: key(i), Permits: 1, Charge: true, Fixed: f}})[0]
			if o.Err != nil || !o.Granted || !o.Window || !warm && store.FixedScripted(s) != scripted {
				t.Fatalf("fixed %s: %+v (the script counted it: %t)", key(i), o, store.FixedScripted(s) != scripted)
			}
			return 1
		}
	}
	for i := range 1024 { // the counts exist, in the window the test runs in
		fixed(wKnown)(i)
	}
	cases := []struct {
		name string
		call func(int) int
	}{
		{"function, named, hot", one(s, func(int) string { return "hot" })},
		{"function, named, 64 keys", one(s, func(i int) string { return named[i%64] })},
		{"function, instance, known", one(s, known)},
		{"function, instance, new", one(s, newKey)},
		{"script, named, hot", one(eval, func(int) string { return "hot" })},
		{"script, instance, known", one(eval, known)},
		{"batch of 64, named", batch(func(i int) string { return named[i%64] })},
		{"batch of 64, instances, known", batch(known)},
		{"window charge, instance, hot", charge(func(int) string { return "w:hot" })},
		{"window charge, 1024 instances", charge(wKnown)},
		{"batch of 64 window charges", charges(wKnown)},
		{"fixed window, hot", fixed(func(int) string { return "w:hot" })},
		{"fixed window, 1024 keys", fixed(wKnown)},
		{"INCRBY+EXPIRE, hot", incr(func(int) string { return "hot" })},
		{"INCRBY+EXPIRE, 1024 keys", incr(wKnown)},
		{"redis_rate, writing, hot", peer(func(int) string { return "hot" })},
		{"redis_rate, writing, 64 keys", peer(func(i int) string { return "r:" + strconv.Itoa(i%64) })},
	}
	per := map[string]float64{}
	var out strings.Builder
	cg.ctl(t, "-i", "on")
	for _, c := range cases {
		warm = true
		for i := range 64 { // the instances exist, the scripts are loaded
			c.call(i)
		}
		warm = false
		per[c.name] = cg.count(t, 300, 3200, c.call)
		fmt.Fprintf(&out, "%-32s %8.0f instructions per decision\n", c.name, per[c.name])
	}
	t.Log("\n" + out.String())
	ratio := func(a, b string, most float64) {
		if r := per[a] / per[b]; r > most {
			t.Errorf("%s / %s = %.2f, want ≤ %.2f", a, b, r, most)
		}
	}
	// The goal is 1.2× (an instance at the cost of a named limiter): 1.19×,
	// 1.18× and 1.18× as measured once an instance's fast path read its
	// deadline with the rest (format 5) and a new instance's TTL and head
	// came from the template's kept readings; 1.21×, 1.26× and 1.24× before;
	// a PEXPIRE per acquire was 1.36×, 1.25× and 1.45×. The bound leaves
	// room for redis-server's periodic tasks, which a slow (busy) run
	// counts more of.
	ratio("function, instance, known", "function, named, 64 keys", 1.24)
	ratio("function, instance, new", "function, named, 64 keys", 1.24)
	ratio("batch of 64, instances, known", "batch of 64, named", 1.24)
	// A script runs the library's hot part on every call, which the function
	// library does once: each function the fast path calls is a closure made
	// per script call. Against a writing redis_rate too, which does not move
	// when the function path gets cheaper. (2.16× and 1.75× as measured once
	// the kinds without a fast path left the hot part; 2.20–2.30× and
	// 1.86–1.88× since, from run to run of one tree, as Lua's collector
	// frees the closures at its own pace. The bounds are a tenth above the
	// runs' middle: a script path a tenth dearer fails.)
	ratio("script, named, hot", "function, named, hot", 2.45)
	ratio("script, named, hot", "redis_rate, writing, hot", 2.05)
	// A window's charge (a rate limit service's counter) takes window.lua's
	// fast path, at about a schedule's cost: 1.07×, 1.19× and 1.12× as
	// measured; 2.46×, 3.42× and 3.33× on the general path before it. The
	// Envoy reference's INCRBY and EXPIRE (one pipeline per call) took
	// 12,100–13,300, against 49,400 per charge in a batch of 64 and
	// 78,600–87,100 alone: instructions in redis-server only; the round
	// trips' system time, which a batch shares, is not counted here
	// (scripts/envoy-vs.sh measures both).
	ratio("window charge, instance, hot", "function, instance, known", 1.3)
	ratio("window charge, 1024 instances", "function, instance, known", 1.3)
	ratio("batch of 64 window charges", "batch of 64, instances, known", 1.3)
	// Without a script (a rate_limit rule under the reference's counting),
	// a lone window decision is a TIME and an INCRBY in one pipeline, its
	// PEXPIRE once per window: at most the reference's INCRBY and EXPIRE
	// (11,900 against 15,100 hot, 11,600 against 13,100 over 1024 keys, as
	// measured: 0.79× and 0.88×).
	ratio("fixed window, hot", "INCRBY+EXPIRE, hot", 1.0)
	ratio("fixed window, 1024 keys", "INCRBY+EXPIRE, 1024 keys", 1.0)
}

// callgrindRedis is a redis-server under callgrind, instrumenting nothing
// until count asks.
type callgrindRedis struct {
	*redistest.Instance
	dir string // where callgrind dumps
}

func startCallgrindRedis(t *testing.T) *callgrindRedis {
	dir := t.TempDir()
	return &callgrindRedis{redistest.ServerUnder(t, []string{"valgrind", "--tool=callgrind", "--instr-atstart=no",
		"--callgrind-out-file=" + filepath.Join(dir, "callgrind.out")}), dir}
}

// count runs call n times, or until it has made most decisions, and
// returns the instructions per decision (call returns how many it made). A
// batch of 64 makes 64 a call: 50 of them take about as long as 300 lone
// calls, so that as many of redis-server's periodic tasks fall in the
// count, and make ten times the decisions. Instrumentation stays on from
// one count to the next (switching it costs a round of callgrind_control
// each way): a dump, which zeroes the counters, starts the count, and the
// warm-up's instructions go with it.
func (cg *callgrindRedis) count(t *testing.T, n, most int, call func(int) int) float64 {
	t.Helper()
	cg.dump(t)
	decisions := 0
	for i := 0; i < n && decisions < most; i++ {
		decisions += call(i)
	}
	return cg.dump(t) / float64(decisions)
}

// ctl sends callgrind a command (callgrind_control's arguments).
func (cg *callgrindRedis) ctl(t *testing.T, args ...string) {
	t.Helper()
	if b, err := exec.Command("callgrind_control", append(args, strconv.Itoa(cg.Pid()))...).CombinedOutput(); err != nil {
		t.Fatalf("callgrind_control %v: %v\n%s", args, err, b)
	}
}

// dump returns the instructions counted since the last dump (or since
// instrumentation was turned on), and zeroes the count.
func (cg *callgrindRedis) dump(t *testing.T) float64 {
	t.Helper()
	cg.ctl(t, "-d")
	dumps, _ := filepath.Glob(filepath.Join(cg.dir, "callgrind.out.*"))
	if len(dumps) == 0 {
		t.Fatal("callgrind wrote no dump")
	}
	defer func() {
		for _, d := range dumps {
			_ = os.Remove(d)
		}
	}()
	var total float64
	for _, d := range dumps {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "totals: "); ok {
				x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				total += x
			}
		}
	}
	return total
}
