//go:build linux

package integration

// Faults an operator meets, injected while `limitd serve` is busy, each on a
// redis-server of its own: limitd pointed at a replica (READONLY), Redis at
// maxmemory (OOM), a hung Redis (SIGSTOP), clients that send their bodies
// slowly or never, and PUTs racing a listing. Each test asserts that no
// response is a 500, that a refusal is a 503 naming the condition, and
// prints how long limitd took to answer 200 again once the fault was gone.
// Every name here starts with fh.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

// fhClient has a timeout far beyond any bound checked here, so that a hang
// shows as a long answer rather than a client error.
var fhClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// fhProbe is one kind of request the load sends.
type fhProbe struct {
	name, method, path, body string
}

// fhResult is one answer.
type fhResult struct {
	probe string
	at    time.Time // when the answer came
	took  time.Duration
	code  int // 0: a transport error
	body  string
}

// fhLoad sends each probe from perProbe goroutines of its own until
// stopped, recording every answer: every probe is always being sent, however
// slow the others are.
type fhLoad struct {
	base, token string
	probes      []fhProbe
	mu          sync.Mutex
	res         []fhResult
	stop        chan struct{}
	wg          sync.WaitGroup
}

func fhStartLoad(t *testing.T, base, token string, perProbe int, probes ...fhProbe) *fhLoad {
	l := &fhLoad{base: base, token: token, probes: probes, stop: make(chan struct{})}
	for w := range perProbe * len(probes) {
		probe := probes[w%len(probes)]
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.record(fhSend(base, token, probe))
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	t.Cleanup(l.halt)
	return l
}

func (l *fhLoad) record(r fhResult) {
	l.mu.Lock()
	l.res = append(l.res, r)
	l.mu.Unlock()
}

func (l *fhLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *fhLoad) results() []fhResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]fhResult(nil), l.res...)
}

func fhSend(base, token string, p fhProbe) fhResult {
	var body io.Reader
	if p.body != "" {
		body = strings.NewReader(p.body)
	}
	req, _ := http.NewRequest(p.method, base+p.path, body)
	if p.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	resp, err := fhClient.Do(req)
	r := fhResult{probe: p.name, took: time.Since(start)}
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r.code, r.body = resp.StatusCode, string(b)
	} else {
		r.body = err.Error()
	}
	r.at = time.Now()
	return r
}

// fhCheck fails on any 500 or transport error and returns the results by
// probe.
func fhCheck(t *testing.T, res []fhResult) map[string][]fhResult {
	t.Helper()
	by := map[string][]fhResult{}
	n500 := 0
	for _, r := range res {
		by[r.probe] = append(by[r.probe], r)
		if r.code >= 500 && r.code != http.StatusServiceUnavailable || r.code == 0 {
			if n500++; n500 <= 5 {
				t.Errorf("%s: %d %s", r.probe, r.code, r.body)
			}
		}
	}
	if n500 > 0 {
		t.Errorf("%d of %d answers were neither 2xx/4xx nor 503", n500, len(res))
	}
	return by
}

// fhRecovery is how long after fixed every probe answered 2xx for good:
// for each probe, the end of the first answer sent after fixed from which on
// every answer was 2xx; the longest of those.
func fhRecovery(t *testing.T, by map[string][]fhResult, fixed time.Time) time.Duration {
	t.Helper()
	var worst time.Duration
	for name, rs := range by {
		var firstGood time.Time
		for _, r := range rs {
			if r.at.Add(-r.took).Before(fixed) {
				continue
			}
			switch ok := r.code >= 200 && r.code < 300; {
			case !ok:
				firstGood = time.Time{}
			case firstGood.IsZero():
				firstGood = r.at
			}
		}
		if firstGood.IsZero() {
			t.Errorf("%s: did not answer 2xx for good after the fault was fixed", name)
			continue
		}
		worst = max(worst, firstGood.Sub(fixed))
	}
	return worst
}

// fhSawDuring reports how many answers of a probe in [from, to) were 503
// with a detail containing want, and how many answers there were.
func fhSawDuring(rs []fhResult, from, to time.Time, want string) (hits, n int) {
	for _, r := range rs {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		n++
		if r.code == http.StatusServiceUnavailable && strings.Contains(r.body, want) {
			hits++
		}
	}
	return hits, n
}

func fhServe(t *testing.T, addr string, extra ...string) *svProc {
	t.Helper()
	env := map[string]string{"LIMITD_REDIS_URL": "redis://" + addr, "LIMITD_PREFIX": "fh", "LIMITD_LOG_LEVEL": "error"}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return svServe(t, env)
}

func fhMust(t *testing.T, p *svProc, method, path, body string, want int) {
	t.Helper()
	if code, b := p.do(method, path, "", body); code != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
	}
}

// fhWaitSync waits until the replica has synced with its master.
func fhWaitSync(t *testing.T, replica *redis.Client) {
	t.Helper()
	svEventually(t, 10*time.Second, func() string {
		info, _ := replica.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "master_sync_in_progress:1") {
			return ""
		}
		return "replica not in sync: " + info
	})
}

// The probes of a rate limiter "fhl" and a template "fht", reading and
// writing.
var fhProbes = []fhProbe{
	{"acquire", "POST", "/v1/limiters/fhl/acquire", `{"permits":1}`},
	{"readyz", "GET", "/readyz", ""},
	{"get", "GET", "/v1/limiters/fhl", ""},
	{"put", "PUT", "/v1/limiters/fhl", `{"rate":1000000,"burst":"inf"}`},
}

// limitd pointed at a server that becomes a read-only replica mid-run
// (REPLICAOF), then a master again (REPLICAOF NO ONE): writes and
// readiness are 503 naming READONLY meanwhile, never 500.
func TestFaultReadOnlyReplica(t *testing.T) {
	longTest(t)
	master := redistest.Server(t)
	node := redistest.Server(t)
	// The limiter exists on both, so that whichever data the node holds
	// it can answer.
	for _, addr := range []string{master.Addr(), node.Addr()} {
		p := fhServe(t, addr)
		fhMust(t, p, "PUT", "/v1/limiters/fhl", `{"rate":1000000,"burst":"inf"}`, 201)
		fhMust(t, p, "POST", "/v1/limiters/fhl/acquire", `{}`, 200) // loads the function library
		p.cmd.Process.Kill()
	}
	p := fhServe(t, node.Addr())
	load := fhStartLoad(t, p.base, "", 1, fhProbes...)
	time.Sleep(300 * time.Millisecond)

	rdb := node.Client()
	faulted := time.Now()
	if err := rdb.ReplicaOf(t.Context(), "127.0.0.1", strconv.Itoa(master.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	fhWaitSync(t, rdb)
	time.Sleep(time.Second)
	// A replica that lacks the library (flushed on the master) cannot load
	// it either: FCALL answers "Function not found" there.
	if err := master.Client().FunctionFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	fixed := time.Now()
	if err := rdb.ReplicaOf(t.Context(), "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	load.halt()

	by := fhCheck(t, load.results())
	for _, probe := range []string{"acquire", "readyz", "put"} {
		if hits, n := fhSawDuring(by[probe], faulted.Add(200*time.Millisecond), fixed, "READONLY"); hits == 0 {
			t.Errorf("%s: no 503 naming READONLY among %d answers on the replica", probe, n)
		}
	}
	rec := fhRecovery(t, by, fixed)
	t.Logf("read-only replica: %d answers, 0 with status 500; after REPLICAOF NO ONE every probe answered 2xx within %v",
		len(load.results()), rec.Round(time.Millisecond))
	if rec > 3*time.Second {
		t.Errorf("recovery took %v", rec)
	}
}

// Redis at maxmemory with noeviction: writes and readiness are 503 naming
// OOM, never 500; raising the limit recovers.
func TestFaultMaxmemory(t *testing.T) {
	longTest(t)
	srv := redistest.Server(t)
	p := fhServe(t, srv.Addr())
	fhMust(t, p, "PUT", "/v1/limiters/fhl", `{"rate":1000000,"burst":"inf"}`, 201)
	var n atomic.Int64
	probes := append(fhProbes, fhProbe{"put-new", "PUT", "/v1/limiters/fhn", `{"rate":10}`})
	load := fhStartLoad(t, p.base, "", 1, probes...)
	// New names, so that every put-new writes new keys.
	go func() {
		for {
			select {
			case <-load.stop:
				return
			default:
			}
			load.record(fhSend(p.base, "", fhProbe{"put-new", "PUT", fmt.Sprintf("/v1/limiters/fhn-%d", n.Add(1)), `{"rate":10}`}))
			time.Sleep(10 * time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)

	rdb := srv.Client()
	ctx := t.Context()
	used, err := fhUsedMemory(rdb)
	if err != nil {
		t.Fatal(err)
	}
	faulted := time.Now()
	rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+2<<20, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.FillMemory(t, rdb)
	// Freed buffers (client query buffers shrink in the background) would
	// let some writes through again; keep it full: what is stored stays
	// over the limit, as after a real fill.
	if used, err = fhUsedMemory(rdb); err != nil {
		t.Fatal(err)
	}
	rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-1<<20, 10))
	time.Sleep(time.Second)
	fixed := time.Now()
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	load.halt()

	by := fhCheck(t, load.results())
	for _, probe := range []string{"acquire", "readyz", "put-new"} {
		// Once filled: the fill itself takes a moment.
		if hits, n := fhSawDuring(by[probe], fixed.Add(-800*time.Millisecond), fixed, "OOM"); hits == 0 || hits < n {
			t.Errorf("%s: %d of %d answers at maxmemory were 503 naming OOM", probe, hits, n)
		}
	}
	rec := fhRecovery(t, by, fixed)
	t.Logf("maxmemory: %d answers, 0 with status 500; filled in %v; after raising maxmemory every probe answered 2xx within %v",
		len(load.results()), fixed.Add(-time.Second).Sub(faulted).Round(time.Millisecond), rec.Round(time.Millisecond))
	if rec > 3*time.Second {
		t.Errorf("recovery took %v", rec)
	}
}

func fhUsedMemory(rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("no used_memory in INFO memory")
}

// fhPid is the redis-server's process id.
func fhPid(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err == nil {
				return pid
			}
		}
	}
	t.Fatal("no process_id in INFO server")
	return 0
}

// fhHungBound is how long any request may take while Redis is hung: the
// client's read timeout (0.5 s) twice (one retry), the readiness bound (1 s),
// a wait for a pooled connection, and room for a busy machine.
const fhHungBound = 3 * time.Second

// A hung Redis (SIGSTOP): every endpoint answers 503 within fhHungBound,
// and 2xx again soon after SIGCONT.
func TestFaultHungRedis(t *testing.T) {
	longTest(t)
	srv := redistest.Server(t)
	p := fhServe(t, srv.Addr())
	fhMust(t, p, "PUT", "/v1/limiters/fhl", `{"rate":1000000,"burst":"inf"}`, 201)
	fhMust(t, p, "PUT", "/v1/limiters/fhs", `{"rate":100,"burst":1}`, 201)
	fhMust(t, p, "PUT", "/v1/templates/fht", `{"pattern":"fhu:*","limiter":{"rate":1000}}`, 201)
	probes := append(fhProbes,
		fhProbe{"acquire-block", "POST", "/v1/limiters/fhs/acquire", `{"block":true,"max_wait":"800ms"}`},
		fhProbe{"acquire-instance", "POST", "/v1/limiters/fhu:1/acquire", `{}`},
		fhProbe{"wait", "GET", "/v1/limiters/fhl/wait", ""},
		fhProbe{"list", "GET", "/v1/limiters", ""},
		fhProbe{"templates", "GET", "/v1/templates", ""},
		fhProbe{"template", "GET", "/v1/templates/fht", ""},
		fhProbe{"put-template", "PUT", "/v1/templates/fht", `{"pattern":"fhu:*","limiter":{"rate":1000}}`},
		fhProbe{"grant", "POST", "/v1/limiters/fhl/grant", `{"permits":1}`},
	)
	load := fhStartLoad(t, p.base, "", 1, probes...)
	time.Sleep(500 * time.Millisecond)

	pid := fhPid(t, srv.Client())
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	// Long enough that each probe's worker, after the answer in flight at
	// SIGSTOP (at most 1.5 s), sends at least one request wholly within.
	time.Sleep(5 * time.Second)
	fixed := time.Now()
	resume()
	time.Sleep(2 * time.Second)
	load.halt()

	by := fhCheck(t, load.results())
	var slowest time.Duration
	for name, rs := range by {
		n503 := 0
		for _, r := range rs {
			start := r.at.Add(-r.took)
			if start.Before(stopped.Add(100*time.Millisecond)) || r.at.After(fixed) {
				continue // not wholly within the hang
			}
			if r.code != http.StatusServiceUnavailable {
				t.Errorf("%s during the hang: %d %s", name, r.code, r.body)
			}
			n503++
			slowest = max(slowest, r.took)
			if r.took > fhHungBound {
				t.Errorf("%s took %v while Redis was hung, over %v", name, r.took.Round(time.Millisecond), fhHungBound)
			}
		}
		if n503 == 0 {
			t.Errorf("%s: no answer fell within the hang", name)
		}
		var most time.Duration
		for _, r := range rs {
			if !r.at.Add(-r.took).Before(stopped) && !r.at.After(fixed) {
				most = max(most, r.took)
			}
		}
		t.Logf("  %-16s slowest answer during the hang %v", name, most.Round(time.Millisecond))
	}
	// Answers still in flight at SIGCONT: none may outlast the bound either.
	for _, r := range load.results() {
		if r.took > fhHungBound {
			t.Errorf("%s took %v (ended %v after SIGCONT)", r.probe, r.took.Round(time.Millisecond), r.at.Sub(fixed).Round(time.Millisecond))
		}
	}
	rec := fhRecovery(t, by, fixed)
	t.Logf("hung Redis: %d answers, 0 with status 500; slowest 503 during the hang %v (bound %v); after SIGCONT every probe answered 2xx within %v",
		len(load.results()), slowest.Round(time.Millisecond), fhHungBound, rec.Round(time.Millisecond))
	if rec > 3*time.Second {
		t.Errorf("recovery took %v", rec)
	}
}

// fhGoroutines reads go_goroutines from /metrics.
func fhGoroutines(t *testing.T, p *svProc, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", p.base+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := fhClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatal("no go_goroutines in /metrics")
	return 0
}

// fhSlowConns is how many connections send a slow body at once.
const fhSlowConns = 2000

// 2,000 connections each declare a 100-byte body and send 10 bytes: the
// server closes every one within the body deadline (5 s; at once when the
// token is missing), other clients are served meanwhile, and the goroutines
// return to their baseline.
func TestFaultSlowBodies(t *testing.T) {
	longTest(t)
	srv := redistest.Server(t)
	for _, tc := range []struct {
		name  string
		env   []string
		token string // the one /metrics and the probes need
		bound time.Duration
	}{
		{"no token", nil, "", 5*time.Second + 3*time.Second},
		{"token", []string{"LIMITD_ADMIN_TOKEN", "fh-admin", "LIMITD_TOKEN", "fh-token", "LIMITD_METRICS_TOKEN", "fh-metrics"},
			"fh-admin", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fhServe(t, srv.Addr(), tc.env...)
			if code, b := p.do("PUT", "/v1/limiters/fhl", tc.token, `{"rate":1000000,"burst":"inf"}`); code >= 300 {
				t.Fatalf("PUT: %d %s", code, b)
			}
			metricsToken := ""
			if tc.token != "" {
				metricsToken = "fh-metrics"
			}
			base := fhGoroutines(t, p, metricsToken)

			load := fhStartLoad(t, p.base, tc.token, 1, fhProbes[0], fhProbes[2])
			addr := strings.TrimPrefix(p.base, "http://")
			closedIn := make([]time.Duration, fhSlowConns)
			var failed atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for i := range fhSlowConns {
				wg.Go(func() {
					closedIn[i] = -1
					c, err := net.DialTimeout("tcp", addr, 5*time.Second)
					if err != nil {
						failed.Add(1)
						return
					}
					defer c.Close()
					t0 := time.Now()
					fmt.Fprintf(c, "PUT /v1/limiters/fhslow-%d HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"rate\":1 ", i)
					c.SetReadDeadline(time.Now().Add(30 * time.Second))
					io.Copy(io.Discard, c) // until the server closes it
					closedIn[i] = time.Since(t0)
				})
			}
			wg.Wait()
			all := time.Since(start)
			load.halt()
			if n := failed.Load(); n > 0 {
				t.Errorf("%d of %d connections could not be opened", n, fhSlowConns)
			}
			var worst time.Duration
			for i, d := range closedIn {
				if d < 0 {
					continue
				}
				worst = max(worst, d)
				if d > tc.bound {
					t.Errorf("connection %d closed after %v, over %v", i, d.Round(time.Millisecond), tc.bound)
					break
				}
			}
			by := fhCheck(t, load.results())
			served := 0
			for _, rs := range by {
				for _, r := range rs {
					if r.code == 200 {
						served++
					}
				}
			}
			if served == 0 {
				t.Error("no other client was served while the slow bodies held connections")
			}
			var now int
			deadline := time.Now().Add(5 * time.Second)
			for {
				if now = fhGoroutines(t, p, metricsToken); now <= base+10 || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if now > base+10 {
				t.Errorf("goroutines %d after the slow bodies, %d before", now, base)
			}
			t.Logf("slow bodies (%s): %d connections, each closed by the server within %v (all done in %v); %d other requests served meanwhile, 0 with status 500; goroutines %d before, %d after",
				tc.name, fhSlowConns, worst.Round(time.Millisecond), all.Round(time.Millisecond), served, base, now)
		})
	}
}

// 8,000 PUTs of new names from 8 goroutines while another pages GET
// /v1/limiters (8 pages of 1,000 by the end, over a hundred full listings
// meanwhile): at the end the listing holds exactly every limiter.
func TestFaultListingRace(t *testing.T) {
	longTest(t)
	srv := redistest.Server(t)
	p := fhServe(t, srv.Addr())
	const pre, writers, perWriter = 3, 8, 1000
	for i := range pre {
		fhMust(t, p, "PUT", fmt.Sprintf("/v1/limiters/fhpre-%d", i), `{"rate":5}`, 201)
	}
	list := func() ([]string, error) {
		var names []string
		cursor := ""
		for {
			code, b := fhGet(p.base + "/v1/limiters?limit=1000&cursor=" + cursor)
			if code != 200 {
				return nil, fmt.Errorf("GET /v1/limiters: %d %s", code, b)
			}
			var page struct {
				Limiters []struct {
					Name string `json:"name"`
				} `json:"limiters"`
				Next string `json:"next"`
			}
			if err := json.Unmarshal(b, &page); err != nil {
				return nil, err
			}
			for _, l := range page.Limiters {
				names = append(names, l.Name)
			}
			if cursor = page.Next; cursor == "" {
				return names, nil
			}
		}
	}
	var stop atomic.Bool
	var listings atomic.Int64
	var lw sync.WaitGroup
	lw.Go(func() {
		for !stop.Load() {
			if _, err := list(); err != nil {
				t.Error(err)
				return
			}
			listings.Add(1)
		}
	})
	start := time.Now()
	var wg sync.WaitGroup
	var bad atomic.Int64
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				r := fhSend(p.base, "", fhProbe{"put", "PUT", fmt.Sprintf("/v1/limiters/fhnew-%d-%04d", w, i), `{"rate":10}`})
				// 200 is a Redis reply lost to a read timeout on a busy
				// machine: the client's retry found the limiter created.
				if r.code != 201 && r.code != 200 {
					if bad.Add(1) <= 5 {
						t.Errorf("PUT: %d %s", r.code, r.body)
					}
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	stop.Store(true)
	lw.Wait()

	names, err := list()
	if err != nil {
		t.Fatal(err)
	}
	want := pre + writers*perWriter
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
	}
	missing := 0
	for w := range writers {
		for i := range perWriter {
			if !seen[fmt.Sprintf("fhnew-%d-%04d", w, i)] {
				missing++
			}
		}
	}
	if len(names) != want || len(seen) != want || missing > 0 {
		t.Errorf("the listing holds %d names (%d distinct), want %d; %d new limiters missing", len(names), len(seen), want, missing)
	}
	t.Logf("listing race: %d PUTs from %d goroutines in %v while %d full listings ran; the listing holds exactly %d limiters, none missing",
		writers*perWriter, writers, took.Round(time.Millisecond), listings.Load(), len(names))
}

func fhGet(url string) (int, []byte) {
	resp, err := fhClient.Get(url)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
