//go:build linux

package integration

// BenchmarkHTTPAcquire measures `limitd serve` as an operator runs it (the
// real binary over a private redis-server) under POST
// /v1/limiters/{name}/acquire, from 1, 16 and 64 connections kept alive, on
// one limiter (hot) and round-robin over 10,000 template instances of "k:*"
// (10k-keys, per-key limits as most services use them). Every acquire is
// granted (rate 1e6/s, burst inf), so it measures the cost of a decision.
// Besides requests/s it reports the CPU time per request of the limitd
// process (/proc, 10 ms ticks) and of redis-server (INFO cpu): on a small
// machine those, not the network, bound throughput, and the load generator
// competes for the same cores.
//
//	go test -run='^$' -bench=BenchmarkHTTPAcquire -benchtime=2s ./integration/

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/internal/testkit/rounds"
)

// hbKeys is how many template instances the 10k-keys runs spread over.
const hbKeys = 10_000

func BenchmarkHTTPAcquire(b *testing.B) {
	srv := redistest.Server(b)
	p := svServe(b, map[string]string{
		"LIMITD_REDIS_URL":   "redis://" + srv.Addr(),
		"LIMITD_ADMIN_TOKEN": svAdmin,
		"LIMITD_PREFIX":      "hb",
	})
	p.json("PUT", "/v1/limiters/hot", svAdmin, `{"rate":1000000,"burst":"inf"}`, http.StatusCreated, nil)
	p.json("PUT", "/v1/templates/k", svAdmin, `{"pattern":"k:*","limiter":{"rate":1000000,"burst":"inf"}}`,
		http.StatusCreated, nil)
	rdb := srv.Client()
	keys := hbKeyNames()
	for _, conns := range []int{1, 16, 64} {
		for _, set := range []struct {
			name  string
			names []string
		}{{"hot", []string{"hot"}}, {"10k-keys", keys}} {
			b.Run(fmt.Sprintf("c%d/%s", conns, set.name), func(b *testing.B) {
				hbLoad(b, p, rdb, conns, set.names)
			})
		}
	}
}

// BenchmarkHTTPAcquireVs compares this tree's limitd serve with another
// limitd binary, LIMITD_BENCH_OTHER (one built from an earlier commit, say),
// as BenchmarkHTTPAcquire runs them: both on one redis-server, each under its
// own prefix, in b.N alternating rounds of one second each (which goes first
// alternates too), from 16 and 64 connections, hot and 10,000 instances. It
// reports the medians of each one's CPU per request and of their ratio per
// round (this / other): the machine's speed moves more between minutes than
// a change does, and alternating rounds cancel that out.
//
//	git worktree add /tmp/before <commit> && (cd /tmp/before && go build -o /tmp/limitd-before ./cmd/limitd)
//	LIMITD_BENCH_OTHER=/tmp/limitd-before go test -run='^$' -bench=BenchmarkHTTPAcquireVs -benchtime=12x ./integration/
func BenchmarkHTTPAcquireVs(b *testing.B) {
	other := os.Getenv("LIMITD_BENCH_OTHER")
	if other == "" {
		b.Skip("LIMITD_BENCH_OTHER names no limitd binary to compare with")
	}
	hbVs(b, []hbServer{{"this", svBinary(b)}, {"other", other}}, []hbRatio{
		{"this/other", func(c map[string]float64) float64 { return c["this"] / c["other"] }},
	})
}

// BenchmarkHTTPFloor is BenchmarkHTTPAcquireVs against testdata/httpfloor:
// echo and net/http answering a grant's body to the same load, with the same
// server settings, deciding nothing. Its CPU per request is the part of
// limitd's that no handler work can remove. With LIMITD_BENCH_OTHER set,
// that binary runs in the same rounds too, and the benchmark reports what
// each limitd spends above the floor (its own work: JSON, middleware,
// metrics, the decision and its batch's hand-off and round trip) and the
// ratio of the two.
//
//	go test -run='^$' -bench=BenchmarkHTTPFloor -benchtime=12x ./integration/
func BenchmarkHTTPFloor(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "httpfloor")
	cmd := exec.Command("go", "build", "-o", bin, "./integration/testdata/httpfloor")
	cmd.Dir = svModuleRoot(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build ./integration/testdata/httpfloor: %v\n%s", err, out)
	}
	servers := []hbServer{{"this", svBinary(b)}, {"floor", bin}}
	ratios := []hbRatio{{"this/floor", func(c map[string]float64) float64 { return c["this"] / c["floor"] }}}
	if other := os.Getenv("LIMITD_BENCH_OTHER"); other != "" {
		servers = append(servers, hbServer{"other", other})
		ratios = append(ratios,
			hbRatio{"this-above-floor-us/req", func(c map[string]float64) float64 { return c["this"] - c["floor"] }},
			hbRatio{"other-above-floor-us/req", func(c map[string]float64) float64 { return c["other"] - c["floor"] }},
			hbRatio{"above-floor-this/other", func(c map[string]float64) float64 {
				return (c["this"] - c["floor"]) / (c["other"] - c["floor"])
			}})
	}
	hbVs(b, servers, ratios)
}

// hbServer is a server binary hbVs runs, by the name its metrics take.
type hbServer struct{ name, bin string }

// hbRatio is a figure hbVs reports, the median over rounds of f of each
// round's CPU per request by server name.
type hbRatio struct {
	name string
	f    func(map[string]float64) float64
}

// hbVs runs servers side by side on one redis-server, each under its own
// prefix, in b.N rounds of one second each (the order rotating from round
// to round), from 16 and 64 connections, hot and 10,000 instances, and
// reports the medians of each one's CPU per request and of ratios.
func hbVs(b *testing.B, servers []hbServer, ratios []hbRatio) {
	srv := redistest.Server(b)
	procs := make([]*svProc, len(servers))
	for i, sv := range servers {
		p := svServeBin(b, sv.bin, map[string]string{
			"LIMITD_REDIS_URL":   "redis://" + srv.Addr(),
			"LIMITD_ADMIN_TOKEN": svAdmin,
			"LIMITD_PREFIX":      "hbvs" + strconv.Itoa(i),
		})
		p.json("PUT", "/v1/limiters/hot", svAdmin, `{"rate":1000000,"burst":"inf"}`, http.StatusCreated, nil)
		p.json("PUT", "/v1/templates/k", svAdmin, `{"pattern":"k:*","limiter":{"rate":1000000,"burst":"inf"}}`,
			http.StatusCreated, nil)
		procs[i] = p
	}
	keys := hbKeyNames()
	for _, conns := range []int{16, 64} {
		for _, set := range []struct {
			name  string
			names []string
		}{{"hot", []string{"hot"}}, {"10k-keys", keys}} {
			b.Run(fmt.Sprintf("c%d/%s", conns, set.name), func(b *testing.B) {
				for _, p := range procs { // warm up: connections, scripts, instances
					hbRound(b, p, conns, set.names, 500*time.Millisecond)
				}
				cpu := make(map[string][]float64)
				figures := make([][]float64, len(ratios))
				for i := range b.N {
					round := map[string]float64{}
					for k := range procs {
						j := (i + k) % len(procs)
						round[servers[j].name] = hbRound(b, procs[j], conns, set.names, time.Second)
					}
					for name, c := range round {
						cpu[name] = append(cpu[name], c)
					}
					for r, ratio := range ratios {
						figures[r] = append(figures[r], ratio.f(round))
					}
				}
				for _, sv := range servers {
					b.ReportMetric(rounds.Median(cpu[sv.name]), sv.name+"-cpu-us/req")
				}
				for r, ratio := range ratios {
					b.ReportMetric(rounds.Median(figures[r]), ratio.name)
					b.Logf("%s: median %.3f, range %.3f–%.3f over %d rounds", ratio.name, rounds.Median(figures[r]),
						slices.Min(figures[r]), slices.Max(figures[r]), len(figures[r]))
				}
			})
		}
	}
}

// hbRound sends acquires from conns connections for d, round-robin over
// names, and returns the CPU time per request of p (µs).
func hbRound(b *testing.B, p *svProc, conns int, names []string, d time.Duration) float64 {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	body := []byte(`{"permits":1}`)
	var next atomic.Int64
	var stop atomic.Bool
	var failed atomic.Value
	cpu0 := hbProcCPU(b, p.cmd.Process.Pid)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for !stop.Load() && failed.Load() == nil {
				i := next.Add(1) - 1
				if err := hbAcquire(hc, p.base+"/v1/limiters/"+names[i%int64(len(names))]+"/acquire", body); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	return float64(hbProcCPU(b, p.cmd.Process.Pid)-cpu0) / 1e3 / float64(next.Load())
}

// hbKeyNames are the hbKeys instance names "k:0", "k:1", ….
func hbKeyNames() []string {
	keys := make([]string, hbKeys)
	for i := range keys {
		keys[i] = "k:" + strconv.Itoa(i)
	}
	return keys
}

// hbLoad sends b.N acquires from conns connections, each on the next of
// names, and reports throughput and CPU per request.
func hbLoad(b *testing.B, p *svProc, rdb *redis.Client, conns int, names []string) {
	urls := make([]string, len(names))
	for i, n := range names {
		urls[i] = p.base + "/v1/limiters/" + n + "/acquire"
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	body := []byte(`{"permits":1}`)
	var next atomic.Int64
	var failed atomic.Value
	serve0, redis0 := hbProcCPU(b, p.cmd.Process.Pid), hbRedisCPU(b, rdb)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) || failed.Load() != nil {
					return
				}
				if err := hbAcquire(hc, urls[i%int64(len(urls))], body); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(hbProcCPU(b, p.cmd.Process.Pid)-serve0)/1e3/n, "serve-cpu-us/req")
	b.ReportMetric(float64(hbRedisCPU(b, rdb)-redis0)/1e3/n, "redis-cpu-us/req")
}

// hbAcquire sends one acquire; anything but a grant is an error, since at
// the benchmark's rate none is expected.
func hbAcquire(hc *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(got, []byte(`"granted":true`)) {
		return fmt.Errorf("POST %s = %d %s, want a grant", url, resp.StatusCode, got)
	}
	return nil
}

// hbProcCPU is the CPU time (user and system, ns) process pid has used,
// from /proc/pid/stat, in clock ticks of 10 ms.
func hbProcCPU(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	const tick = int64(10 * time.Millisecond) // USER_HZ, 100 on Linux
	return (utime + stime) * tick
}

// hbRedisCPU is the CPU time (user and system, ns) redis-server has used,
// from INFO cpu.
func hbRedisCPU(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", line, err)
			}
			total += x
		}
	}
	return int64(total * 1e9)
}
