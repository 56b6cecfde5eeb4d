// envoyvs measures `limitd serve`'s gRPC front end against the Envoy
// reference rate limit server; scripts/envoy-vs.sh says how, builds both
// servers and this program, and runs it. One process drives both, each over
// its own gRPC connection. Every call must be answered OK within the limit
// and counted: after each side's round the sum of the counters of the row's
// values in Redis must have grown by the round's calls.
package main

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/envoyrules"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/internal/testkit/rounds"
	"github.com/limitd/limitd/store"
)

// prog starts redis-server and the servers, and stops them at the end or
// on a failure.
var prog = redistest.NewProgram("envoyvs")

// The rules both servers are given: one domain, one descriptor key whose
// every value has its own counter, a limit no round comes near. A minute's
// window holds a round and its reads (see runRound).
const (
	domain   = "envoyvs"
	descKey  = "k"
	limit    = 1_000_000_000
	unit     = "minute"
	unitSecs = 60
)

// domainYAML is the rules as one config file of the reference's; limitd's
// boot file has it as an item of its domains: list.
var domainYAML = fmt.Sprintf(`domain: %s
descriptors:
  - key: %s
    rate_limit: {unit: %s, requests_per_unit: %d}
`, domain, descKey, unit, limit)

// The servers' key prefixes: they never share a key.
const (
	limitdPrefix = "vs-limitd"
	refPrefix    = "vs-ref:" // the reference appends the domain with no separator
)

// TestMain is the program: its script builds it with go test -c and runs it
// with the flags below, not as a test.
func TestMain(*testing.M) {
	limitdBin := flag.String("limitd", "", "the limitd binary")
	refBin := flag.String("ref", "", "the reference server's binary (src/service_cmd)")
	limitdVersion := flag.String("limitd-version", "this tree", "limitd's version, for the output")
	refVersion := flag.String("ref-version", "?", "the reference's module version, for the output")
	refEnv := flag.String("ref-env", "", "more environment for the reference, space-separated NAME=VALUE")
	limitdEnv := flag.String("limitd-env", "", "more environment for limitd, space-separated NAME=VALUE")
	nRounds := flag.Int("rounds", 7, "alternating rounds per row")
	dur := flag.Duration("round", 1500*time.Millisecond, "how long each side runs in a round")
	nKeys := flag.Int("keys", 10_000, "the values of the round-robin rows")
	only := flag.String("callers", "", "the rows to run, by callers, comma-separated (default: 1,16,64)")
	flag.Parse()
	if *limitdBin == "" || *refBin == "" {
		prog.Fatal("usage: envoyvs -limitd BIN -ref BIN [flags]")
	}
	ctx := context.Background()
	tmp := prog.TempDir()
	rdb := redistest.Server(prog).Client()
	redisVersion := infoField(must(rdb.Info(ctx, "server").Result()), "redis_version")

	limitdExtra := strings.Fields(*limitdEnv)
	limitd := startLimitd(ctx, *limitdBin, tmp, rdb, limitdExtra)
	extra := strings.Fields(*refEnv)
	ref := startRef(ctx, *refBin, tmp, rdb, extra)
	sides := []*side{limitd, ref}

	rows := []row{{callers: 1, keys: 1}, {callers: 1, keys: *nKeys}, {callers: 16, keys: 1},
		{callers: 16, keys: *nKeys}, {callers: 64, keys: 1}, {callers: 64, keys: *nKeys}}
	if *only != "" {
		rows = slices.DeleteFunc(rows, func(r row) bool { return !slices.Contains(strings.Split(*only, ","), strconv.Itoa(r.callers)) })
		if len(rows) == 0 {
			prog.Fatalf("-callers %q: must name 1, 16 or 64, comma-separated", *only)
		}
	}

	fmt.Printf("limitd %s (`limitd serve`%s, gRPC front end) against the Envoy reference rate limit server %s\n", *limitdVersion, envNote(" with ", limitdExtra), *refVersion)
	fmt.Printf("(github.com/envoyproxy/ratelimit, its defaults%s), both over one redis-server %s;\n", envNote(" but ", extra), redisVersion)
	fmt.Printf("%s, %d cores (the servers, Redis and the load on the same cores), %s, load average before: %s.\n",
		cpuModel(), runtime.NumCPU(), runtime.Version(), loadavg())
	fmt.Printf("ShouldRateLimit with one descriptor (%s=<value>) of a rule of %s per %s per value, every call within it;\n",
		descKey, thousands(limit), unit)
	fmt.Printf("each server over one gRPC connection; %d round(s) of %v per side per row, the side going first alternating; medians.\n\n", *nRounds, *dur)

	results := make([]rowResult, len(rows))
	for i, r := range rows {
		results[i] = runRow(ctx, rdb, sides, r, *nRounds, *dur)
	}
	printTables(rows, results)
	nl, nr, other := keyCounts(ctx, rdb)
	fmt.Printf("Redis at the end: %s limitd keys (%s:*), %s reference keys (%s*), %d others. Load average after: %s.\n",
		thousands(float64(nl)), limitdPrefix, thousands(float64(nr)), refPrefix, other, loadavg())
	ok := true
	for _, s := range sides {
		ok = s.printProblems(results) && ok
	}
	prog.Close()
	if !ok {
		os.Exit(1)
	}
}

func printTables(rows []row, results []rowResult) {
	fmt.Println("| callers, keys | limitd calls/s | reference calls/s | **limitd / reference, calls/s** | limitd Redis CPU per call | reference Redis CPU per call | **limitd / reference, Redis CPU per call** |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for i, r := range rows {
		res := results[i]
		l, f := res.sides[0], res.sides[1]
		fmt.Printf("| %s | %s | %s | %s | %.1f µs | %.1f µs | %s |\n", r, thousands(l.median(rps)), thousands(f.median(rps)),
			ratioCell(res.speed), l.median(redisCPU)*1e6, f.median(redisCPU)*1e6, ratioCell(res.cpu))
	}
	fmt.Println()
	fmt.Println("What each asks of Redis per call (INFO commandstats: commands per call, and Redis's µs in them per call, the")
	fmt.Println("commands a script runs listed after it and counted in its µs), and each server process's own CPU per call (/proc):")
	fmt.Println()
	fmt.Println("| callers, keys | limitd: commands per call | limitd: Redis µs per call | reference: commands per call | reference: Redis µs per call | limitd CPU per call | reference CPU per call |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for i, r := range rows {
		l, f := results[i].sides[0], results[i].sides[1]
		fmt.Printf("| %s | %s | %.1f | %s | %.1f | %.1f µs | %.1f µs |\n", r, l.commands(), l.usecPerCall(),
			f.commands(), f.usecPerCall(), l.median(procCPU)*1e6, f.median(procCPU)*1e6)
	}
	fmt.Println()
	fmt.Println("What a call costs the machine: the driver's CPU (this program, the gRPC client of both), and that with the")
	fmt.Println("server's and Redis's; and the cores the three kept busy. Where they keep every core busy, the calls/s ratio")
	fmt.Println("is the last column's; a side that leaves cores idle falls short of it:")
	fmt.Println()
	fmt.Println("| callers, keys | driver CPU per call, limitd's | driver CPU per call, the reference's | all CPU per call, limitd | all CPU per call, reference | cores busy (server, Redis, driver), limitd's rounds | the same, the reference's rounds | **reference / limitd, all CPU per call** |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for i, r := range rows {
		l, f := results[i].sides[0], results[i].sides[1]
		fmt.Printf("| %s | %.1f µs | %.1f µs | %.1f µs | %.1f µs | %.2f | %.2f | %s |\n", r, l.median(driverCPU)*1e6, f.median(driverCPU)*1e6,
			l.median(allCPU)*1e6, f.median(allCPU)*1e6, l.median(busy), f.median(busy), ratioCell(results[i].all))
	}
	fmt.Println()
}

// printProblems prints how many calls s answered OK, and the ten most
// frequent texts of its errors and wrong answers (warm-ups included); it
// reports whether there were none.
func (s *side) printProblems(results []rowResult) bool {
	var calls, errs, wrong int64
	for _, res := range results {
		for _, sr := range res.sides {
			if sr.side == s {
				calls, errs, wrong = calls+sr.calls, errs+sr.errs, wrong+sr.wrong
			}
		}
	}
	fmt.Printf("%s: %s calls answered OK and counted, %d errors, %d wrong answers.\n", s.name, thousands(float64(calls)), errs, wrong)
	texts := slices.SortedFunc(maps.Keys(s.problems), func(a, b string) int {
		return cmp.Or(cmp.Compare(s.problems[b], s.problems[a]), cmp.Compare(a, b))
	})
	for _, t := range texts[:min(10, len(texts))] {
		fmt.Printf("  %s: %d× %s\n", s.name, s.problems[t], t)
	}
	if len(texts) > 10 {
		fmt.Printf("  %s: and %d other texts\n", s.name, len(texts)-10)
	}
	return len(texts) == 0
}

// row is one line of the table: calls in flight, over how many values of
// the descriptor (1: one hot counter; else round-robin).
type row struct{ callers, keys int }

func (r row) String() string {
	k := "hot"
	if r.keys > 1 {
		k = thousands(float64(r.keys)) + " keys"
	}
	return fmt.Sprintf("%d, %s", r.callers, k)
}

// side is one server under test.
type side struct {
	name string
	rl   rlsv3.RateLimitServiceClient
	pid  int
	// counts reads the sum of values' counters in the window starting at
	// window (Unix s), and which values have none; it fails the program if
	// it cannot.
	counts   func(ctx context.Context, values []string, window int64) (sum int64, missing []string)
	problems map[string]int // error and wrong answer texts, counted
	mu       sync.Mutex
}

func (s *side) problem(text string) {
	s.mu.Lock()
	s.problems[text]++
	s.mu.Unlock()
}

// roundResult is one side's figures in one round.
type roundResult struct {
	calls, errs, wrong int64
	elapsed            time.Duration
	redisCPU, procCPU  float64 // seconds
	driverCPU          float64 // this program's, seconds
	cmds               map[string]cmdStat
}

type cmdStat struct{ calls, usec int64 }

// sideResult is one side's figures over a row's rounds.
type sideResult struct {
	side               *side
	rounds             []roundResult
	calls, errs, wrong int64
	cmds               map[string]cmdStat // over every round
}

type metric func(roundResult) float64

func rps(r roundResult) float64       { return float64(r.calls) / r.elapsed.Seconds() }
func redisCPU(r roundResult) float64  { return r.redisCPU / float64(r.calls) }
func procCPU(r roundResult) float64   { return r.procCPU / float64(r.calls) }
func driverCPU(r roundResult) float64 { return r.driverCPU / float64(r.calls) }

// allCPU is the CPU a call cost the machine: the server's, Redis's and the
// driver's. Where they share the cores and keep them busy, calls/s follow it.
func allCPU(r roundResult) float64 { return (r.procCPU + r.redisCPU + r.driverCPU) / float64(r.calls) }

// busy is how many of the machine's cores the three kept busy.
func busy(r roundResult) float64 { return (r.procCPU + r.redisCPU + r.driverCPU) / r.elapsed.Seconds() }

func (s sideResult) median(m metric) float64 {
	xs := make([]float64, len(s.rounds))
	for i, r := range s.rounds {
		xs[i] = m(r)
	}
	return rounds.Median(xs)
}

// commands lists the Redis commands a call costs over the row's rounds,
// most frequent first ("expire 1.00, incrby 1.00"). A side that runs
// scripts (runsScripts) sends only them: the other commands are run inside
// them ("fcall 0.09; inside: mget 0.09, …").
func (s sideResult) commands() string {
	var sent, inside []string
	for _, n := range slices.SortedFunc(maps.Keys(s.cmds), func(a, b string) int {
		return cmp.Or(cmp.Compare(s.cmds[b].calls, s.cmds[a].calls), cmp.Compare(a, b))
	}) {
		per := float64(s.cmds[n].calls) / float64(s.calls)
		part := fmt.Sprintf("%s %.2f", n, per)
		switch {
		case scriptCommands[n] && per > 0 && per < 0.005: // a script now and then: shown
			part = fmt.Sprintf("%s %d in all", n, s.cmds[n].calls)
		case per < 0.005:
			continue
		}
		if s.runsScripts() && !scriptCommands[n] {
			inside = append(inside, part)
		} else {
			sent = append(sent, part)
		}
	}
	out := strings.Join(sent, ", ")
	if len(inside) > 0 {
		out += "; inside: " + strings.Join(inside, ", ")
	}
	return out
}

// usecPerCall is the µs Redis spent per call, a script's commands counted
// in the script's.
func (s sideResult) usecPerCall() float64 {
	var usec int64
	for n, c := range s.cmds {
		if !s.runsScripts() || scriptCommands[n] {
			usec += c.usec
		}
	}
	return float64(usec) / float64(s.calls)
}

// A side runs scripts when at least one call in a hundred sends one: limitd
// counting a window without a script falls back to one now and then.
func (s sideResult) runsScripts() bool {
	var calls int64
	for n, c := range s.cmds {
		if scriptCommands[n] {
			calls += c.calls
		}
	}
	return calls > 0 && float64(calls)/float64(s.calls) >= 0.01
}

// scriptCommands run Lua, whose own commands commandstats counts as well.
var scriptCommands = map[string]bool{"eval": true, "eval_ro": true, "evalsha": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true}

// rowResult is a row's figures: each side's, and the per-round ratios
// limitd / reference.
type rowResult struct {
	sides      []sideResult
	speed, cpu []float64
	all        []float64 // the reference's CPU per call, all of it, over limitd's
}

// request is a call for one hit of the rule's value.
func request(value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: descKey, Value: value}}}}}
}

// runRow warms both sides up on the row's values, then runs the rounds.
func runRow(ctx context.Context, rdb *redis.Client, sides []*side, r row, nRounds int, d time.Duration) rowResult {
	values := make([]string, r.keys)
	reqs := make([]*rlsv3.RateLimitRequest, r.keys)
	for i := range values {
		values[i] = "v" + strconv.Itoa(i)
		reqs[i] = request(values[i])
	}
	res := rowResult{sides: make([]sideResult, len(sides))}
	cursors := make([]atomic.Int64, len(sides))
	for i, s := range sides {
		res.sides[i] = sideResult{side: s, cmds: map[string]cmdStat{}}
		// Every value once, then the row's load: a round measures the steady state.
		var c atomic.Int64
		load(ctx, s, reqs, min(64, r.keys), 0, int64(r.keys), &c)
		load(ctx, s, reqs, r.callers, 300*time.Millisecond, 0, &cursors[i])
	}
	for n := range nRounds {
		per := make([]roundResult, len(sides))
		for k := range sides {
			i := (n + k) % len(sides) // who goes first alternates
			per[i] = runRound(ctx, rdb, sides[i], reqs, values, r.callers, d, &cursors[i])
			sr := &res.sides[i]
			sr.rounds = append(sr.rounds, per[i])
			sr.calls, sr.errs, sr.wrong = sr.calls+per[i].calls, sr.errs+per[i].errs, sr.wrong+per[i].wrong
			for name, c := range per[i].cmds {
				t := sr.cmds[name]
				sr.cmds[name] = cmdStat{t.calls + c.calls, t.usec + c.usec}
			}
		}
		res.speed = append(res.speed, rps(per[0])/rps(per[1]))
		res.cpu = append(res.cpu, redisCPU(per[0])/redisCPU(per[1]))
		res.all = append(res.all, allCPU(per[1])/allCPU(per[0]))
	}
	return res
}

// runRound runs one side for d and measures its calls, Redis's CPU and
// commands and the server's CPU; then checks that its counters in Redis
// moved by as many calls as it answered OK.
func runRound(ctx context.Context, rdb *redis.Client, s *side, reqs []*rlsv3.RateLimitRequest, values []string,
	callers int, d time.Duration, cursor *atomic.Int64) roundResult {
	// Only one window's counts add up: a round that could reach the
	// window's end waits for the next window.
	w := windowOf(time.Now())
	if end := time.Unix(w+unitSecs, 0); time.Until(end) < d+windowMargin {
		time.Sleep(time.Until(end) + 100*time.Millisecond)
		w = windowOf(time.Now())
	}
	before, _ := s.counts(ctx, values, w)
	first := cursor.Load()
	info0, cpu0 := must(rdb.Info(ctx, "cpu", "commandstats").Result()), redistest.ProcessCPU(prog, s.pid)
	self0 := redistest.ProcessCPU(prog, os.Getpid())
	out := load(ctx, s, reqs, callers, d, 0, cursor)
	self1 := redistest.ProcessCPU(prog, os.Getpid())
	info1, cpu1 := must(rdb.Info(ctx, "cpu", "commandstats").Result()), redistest.ProcessCPU(prog, s.pid)
	out.redisCPU = redisCPUSecs(info1) - redisCPUSecs(info0)
	out.procCPU = (cpu1 - cpu0).Seconds()
	out.driverCPU = (self1 - self0).Seconds()
	out.cmds = commandDeltas(info0, info1)
	if out.calls == 0 {
		prog.Fatalf("%s answered no call OK in a round of %v: %v", s.name, d, s.problems)
	}

	// Each value asked must have its counter, and the counters together
	// must have grown by the calls answered OK (an error may have counted).
	last := cursor.Load()
	asked := values
	if n := last - first; n < int64(len(values)) {
		asked = make([]string, 0, n)
		for i := first; i < last; i++ {
			asked = append(asked, values[i%int64(len(values))])
		}
	}
	after, _ := s.counts(ctx, values, w)
	_, missing := s.counts(ctx, asked, w)
	if now := windowOf(time.Now()); now != w {
		prog.Fatalf("%s: a round of %v and its reads took more than %v, past the end of the rule's window: the counts cannot be checked",
			s.name, d, d+windowMargin)
	}
	if len(missing) > 0 {
		prog.Fatalf("%s: %d of the %d values asked in a round of %d callers have no counter in Redis after it (%s=%s …)",
			s.name, len(missing), len(asked), callers, descKey, missing[0])
	}
	if moved := after - before; moved < out.calls || moved > out.calls+out.errs {
		prog.Fatalf("%s: its counters in Redis moved by %d in a round in which it answered %d calls OK (%d errors)",
			s.name, moved, out.calls, out.errs)
	}
	return out
}

// windowMargin is how long a round's reads of the counters may take.
const windowMargin = 3 * time.Second

// windowOf is the start (Unix s) of the rule's window that holds t.
func windowOf(t time.Time) int64 { return t.Unix() / unitSecs * unitSecs }

// load drives s from callers goroutines, each taking the next request from
// cursor (round-robin over reqs), for d, or until cursor reaches upto
// (d 0). Any answer but OK within the limit is counted and recorded.
func load(ctx context.Context, s *side, reqs []*rlsv3.RateLimitRequest, callers int, d time.Duration, upto int64,
	cursor *atomic.Int64) roundResult {
	// A hung call ends with the round's context, not with a timer per call.
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	var (
		stop               atomic.Bool
		calls, errs, wrong atomic.Int64
		wg                 sync.WaitGroup
	)
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for !stop.Load() {
				i := cursor.Add(1) - 1
				if d == 0 && i >= upto {
					cursor.Add(-1)
					return
				}
				resp, err := s.rl.ShouldRateLimit(ctx, reqs[i%int64(len(reqs))])
				switch {
				case err != nil:
					errs.Add(1)
					s.problem("error: " + status.Convert(err).String())
				case answerProblem(resp) != "":
					wrong.Add(1)
					s.problem("wrong answer: " + answerProblem(resp))
				default:
					calls.Add(1)
				}
			}
		})
	}
	if d > 0 {
		time.Sleep(d)
		stop.Store(true)
	}
	wg.Wait()
	return roundResult{calls: calls.Load(), errs: errs.Load(), wrong: wrong.Load(), elapsed: time.Since(start)}
}

// answerProblem says what is wrong with an answer to one descriptor within
// the limit ("" if nothing): OK, the rule's limit, and a remainder below it.
func answerProblem(r *rlsv3.RateLimitResponse) string {
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		return "overall_code " + r.GetOverallCode().String()
	}
	if len(r.GetStatuses()) != 1 {
		return fmt.Sprintf("%d statuses for one descriptor", len(r.GetStatuses()))
	}
	st := r.GetStatuses()[0]
	switch cl := st.GetCurrentLimit(); {
	case st.GetCode() != rlsv3.RateLimitResponse_OK:
		return "status code " + st.GetCode().String()
	case cl.GetRequestsPerUnit() != limit || !strings.EqualFold(cl.GetUnit().String(), unit):
		return fmt.Sprintf("current_limit %d per %v", cl.GetRequestsPerUnit(), cl.GetUnit())
	case st.GetLimitRemaining() >= limit:
		return fmt.Sprintf("limit_remaining %d of %d: not counted", st.GetLimitRemaining(), limit)
	}
	return ""
}

// startLimitd runs `limitd serve` over addr with the rules in its boot
// file, and returns it as a side once a call is answered.
func startLimitd(ctx context.Context, bin, tmp string, rdb *redis.Client, extra []string) *side {
	boot := filepath.Join(tmp, "limitd.yaml")
	item := strings.TrimSuffix(strings.ReplaceAll(domainYAML, "\n", "\n    "), "    ") // indented as a list item
	writeFile(boot, "domains:\n  - "+item)
	grpcAddr, httpAddr := freeAddr(), freeAddr()
	p := startProc("limitd", bin, tmp, append([]string{
		"LIMITD_REDIS_URL=redis://" + rdb.Options().Addr,
		"LIMITD_PREFIX=" + limitdPrefix,
		"LIMITD_CONFIG=" + boot,
		"LIMITD_GRPC_ADDR=" + grpcAddr,
		"LIMITD_ADDR=" + httpAddr,
	}, extra...), "serve")
	waitHTTP(p, "http://"+httpAddr+"/readyz")
	s := newSide("limitd", grpcAddr, p)
	waitCall(ctx, s, p)

	// limitd counts each value in a window counter of the rule's template
	// (docs/envoy.md): the count of the window holding Redis' time now.
	st := store.New(rdb, store.WithPrefix(limitdPrefix))
	prog.Cleanup(func() { _ = st.Close() })
	var pattern string
	for _, t := range must(st.Templates(ctx)) {
		if strings.HasPrefix(t.ID, envoyrules.TemplatePrefix+domain+".") {
			pattern = t.Pattern
		}
	}
	prefix, ok := strings.CutSuffix(pattern, "*")
	if !ok {
		prog.Fatalf("limitd: no template of the rule in Redis (want %s%s.…, its pattern ending in *)", envoyrules.TemplatePrefix, domain)
	}
	s.counts = func(ctx context.Context, values []string, _ int64) (int64, []string) {
		names := make([]string, len(values))
		for i, v := range values {
			names[i] = prefix + v
		}
		counts, err := st.FixedCounts(ctx, names, unitSecs*time.Second)
		if err != nil {
			prog.Fatalf("limitd: reading its counters: %v", err)
		}
		var sum int64
		var missing []string
		for i, n := range counts {
			if n == 0 {
				missing = append(missing, values[i]) // (counted nothing)
			}
			sum += n
		}
		return sum, missing
	}
	return s
}

// startRef runs the reference server over addr with the rules as its one
// config file, and returns it as a side once a call is answered.
func startRef(ctx context.Context, bin, tmp string, rdb *redis.Client, extra []string) *side {
	root := filepath.Join(tmp, "runtime")
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		prog.Fatal(err)
	}
	writeFile(filepath.Join(root, "ratelimit", "config", domain+".yaml"), domainYAML)
	grpcAddr, httpAddr, debugAddr := freeAddr(), freeAddr(), freeAddr()
	env := []string{
		"USE_STATSD=false",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + rdb.Options().Addr,
		"RUNTIME_ROOT=" + root,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false",
		"RUNTIME_IGNOREDOTFILES=true",
		"CACHE_KEY_PREFIX=" + refPrefix,
		"LOG_LEVEL=warn",
		"HOST=127.0.0.1", "PORT=" + port(httpAddr),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(grpcAddr),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + port(debugAddr),
	}
	p := startProc("reference", bin, tmp, append(env, extra...))
	waitHTTP(p, "http://"+httpAddr+"/healthcheck")
	s := newSide("reference", grpcAddr, p)
	waitCall(ctx, s, p)

	// The reference counts a value in one key per window, named by the
	// prefix, domain, key, value and the window's start (Unix s).
	s.counts = func(ctx context.Context, values []string, window int64) (int64, []string) {
		suffix := "_" + strconv.FormatInt(window, 10)
		var sum int64
		var missing []string
		for chunk := range slices.Chunk(values, 1000) {
			keys := make([]string, len(chunk))
			for i, v := range chunk {
				keys[i] = refPrefix + domain + "_" + descKey + "_" + v + suffix
			}
			got, err := rdb.MGet(ctx, keys...).Result()
			if err != nil {
				prog.Fatalf("reference: reading its counters: %v", err)
			}
			for i, x := range got {
				if x == nil {
					missing = append(missing, chunk[i])
					continue
				}
				n, err := strconv.ParseInt(x.(string), 10, 64)
				if err != nil {
					prog.Fatalf("reference: counter %s: %v", keys[i], err)
				}
				sum += n
			}
		}
		return sum, missing
	}
	return s
}

func newSide(name, grpcAddr string, p *proc) *side {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		prog.Fatal(err)
	}
	prog.Cleanup(func() { _ = conn.Close() })
	return &side{name: name, rl: rlsv3.NewRateLimitServiceClient(conn), pid: p.cmd.Process.Pid, problems: map[string]int{}}
}

// waitCall waits until s answers a call OK (its rules loaded).
func waitCall(ctx context.Context, s *side, p *proc) {
	req := request("ready")
	var last string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := s.rl.ShouldRateLimit(ctx, req)
		if last = fmt.Sprint(err); err == nil {
			if last = answerProblem(resp); last == "" {
				return
			}
		}
	}
	prog.Fatalf("%s did not answer a call OK within 15 s (%s); its log:\n%s", s.name, last, p.logTail())
}

// proc is a server process this program started, logging to a file.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// startProc starts bin with only env (and PATH, HOME) in its environment,
// so that nothing of the caller's configures either server.
func startProc(name, bin, tmp string, env []string, args ...string) *proc {
	logPath := filepath.Join(tmp, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		prog.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		prog.Fatalf("%s: %v", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(p.exited)
	}()
	prog.Cleanup(p.stop)
	return p
}

// stop ends the process: SIGTERM, then SIGKILL after 5 s.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// waitHTTP waits until url answers 200, or the process exits.
func waitHTTP(p *proc, url string) {
	c := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-p.exited:
			prog.Fatalf("%s exited during start-up; its log:\n%s", p.name, p.logTail())
		default:
		}
		if resp, err := c.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	prog.Fatalf("%s: %s did not answer 200 within 15 s; its log:\n%s", p.name, url, p.logTail())
}

// freeAddr is a loopback address nobody listens on (never port 6379).
func freeAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(prog))) }

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// infoField is one field of an INFO answer ("" if absent).
func infoField(info, name string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), name+":"); ok {
			return v
		}
	}
	return ""
}

// redisCPUSecs is the server's CPU time so far, system and user.
func redisCPUSecs(info string) float64 {
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(infoField(info, f), 64)
		if err != nil {
			prog.Fatalf("INFO cpu: %s: %v", f, err)
		}
		total += v
	}
	return total
}

// commandDeltas are the calls and µs of each command between two INFO
// commandstats answers, the program's own INFO left out.
func commandDeltas(before, after string) map[string]cmdStat {
	b, a := commandStats(before), commandStats(after)
	out := map[string]cmdStat{}
	for name, s := range a {
		if name == "info" {
			continue
		}
		if d := (cmdStat{s.calls - b[name].calls, s.usec - b[name].usec}); d.calls > 0 {
			out[name] = d
		}
	}
	return out
}

// commandStats reads cmdstat_<name>:calls=…,usec=…,… lines.
func commandStats(info string) map[string]cmdStat {
	out := map[string]cmdStat{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(line, ":")
		var s cmdStat
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				s.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				s.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[name] = s
	}
	return out
}

// keyCounts counts the keys in Redis: limitd's, the reference's, others.
func keyCounts(ctx context.Context, rdb *redis.Client) (l, r, other int64) {
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		switch k := iter.Val(); {
		case strings.HasPrefix(k, limitdPrefix+":"):
			l++
		case strings.HasPrefix(k, refPrefix):
			r++
		default:
			other++
		}
	}
	if err := iter.Err(); err != nil {
		prog.Fatal(err)
	}
	return l, r, other
}

func ratioCell(xs []float64) string {
	return fmt.Sprintf("**%.2f×** (%.2f–%.2f)", rounds.Median(xs), slices.Min(xs), slices.Max(xs))
}

// thousands writes x rounded, with commas: 12,345.
func thousands(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// envNote is extra's settings after lead, for the output ("" if none).
func envNote(lead string, extra []string) string {
	if len(extra) == 0 {
		return ""
	}
	return lead + strings.Join(extra, " ")
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	if v := infoField(strings.ReplaceAll(string(b), "\t", ""), "model name"); v != "" {
		return strings.TrimSpace(v)
	}
	return runtime.GOARCH
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func writeFile(path, text string) {
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		prog.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		prog.Fatal(err)
	}
	return v
}
