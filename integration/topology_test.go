//go:build linux

package integration

// Faults of the Redis topologies users run, injected mid-run into a real
// limitd serve and real limitd bench processes: a Redis Cluster master
// killed (its replica takes over), a cluster shard restarted empty, a
// Sentinel failover with the old master coming back. Each test asserts that
// no response is a 500, measures the time to recover (t.Logf, for the
// table of docs/reliability.md) and holds it to a bound.
//
// Run them alone with
//
//	go test -count=1 -v -run 'TestTopology' ./integration/
//
// TestTopologyOverAllocation also counts the permits a fleet of bench
// processes got around a failover and an empty restart, and holds it to ≤ 1%
// beyond the rate: the schedule floor (callers carry the furthest position
// they saw) keeps an empty restart from granting again what was granted.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

const (
	tpPollEvery = 100 * time.Millisecond
	// tpRecoverWithin is the promise: limiters answer within this of a
	// promotion.
	tpRecoverWithin = 5 * time.Second
	// tpHang is how long TestTopologySentinelFailover waits for what must
	// happen before it calls it a hang: a bound no busy machine reaches,
	// not a measure (the times it logs are the measures).
	tpHang = time.Minute
)

// tpBoot is the boot file of the topology tests: orders and eight more
// limiters, spread over every shard of a cluster, and a template.
const tpBoot = `limiters:
  orders: {rate: 1000}
  a0: {rate: 100}
  a1: {rate: 100}
  a2: {rate: 100}
  a3: {rate: 100}
  a4: {rate: 100}
  a5: {rate: 100}
  a6: {rate: 100}
  a7: {rate: 100}
templates:
  per-user: {pattern: "user:*", order: 10, idle_ttl: 10m, limiter: {rate: 50}}
`

var tpBootNames = []string{"orders", "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"}

// tpServe starts limitd serve over url with boot as its boot file.
func tpServe(t *testing.T, url, boot string) *svProc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limitd.yaml")
	if err := os.WriteFile(path, []byte(boot), 0o644); err != nil {
		t.Fatal(err)
	}
	return svServe(t, map[string]string{"LIMITD_REDIS_URL": url, "LIMITD_CONFIG": path, "LIMITD_LOG_LEVEL": "debug"})
}

// tpClusterURL is the cluster URL form naming every node of c.
func tpClusterURL(c *redistest.ClusterInstance) string {
	addrs := c.Addrs()
	u := "redis://" + addrs[0] + "?"
	for i, a := range addrs[1:] {
		if i > 0 {
			u += "&"
		}
		u += "addr=" + a
	}
	return u
}

// tpReply is one polled answer; code 0 is a transport error.
type tpReply struct {
	at   time.Time // when the request was sent
	code int
	body string
}

// tpPoller acquires one permit of name every tpPollEvery until stopped.
type tpPoller struct {
	mu      sync.Mutex
	replies []tpReply
	stop    chan struct{}
	done    chan struct{}
}

func tpPoll(t *testing.T, base, name string) *tpPoller {
	t.Helper()
	p := &tpPoller{stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: 3 * time.Second}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(tpPollEvery)
		defer tick.Stop()
		for {
			at := time.Now()
			r := tpReply{at: at}
			resp, err := client.Post(base+"/v1/limiters/"+name+"/acquire", "application/json", strings.NewReader(`{"permits":1}`))
			if err != nil {
				r.body = err.Error()
			} else {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				r.code, r.body = resp.StatusCode, string(b)
			}
			p.mu.Lock()
			p.replies = append(p.replies, r)
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(p.halt)
	return p
}

func (p *tpPoller) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// all returns the replies so far.
func (p *tpPoller) all() []tpReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.replies)
}

// okSince returns the first 200 sent at or after from, if any.
func (p *tpPoller) okSince(from time.Time) (time.Time, bool) {
	for _, r := range p.all() {
		if !r.at.Before(from) && r.code == http.StatusOK {
			return r.at, true
		}
	}
	return time.Time{}, false
}

// waitOK waits until a 200 sent at or after from arrives, up to within.
func (p *tpPoller) waitOK(from time.Time, within time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if at, ok := p.okSince(from); ok {
			return at, true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p.okSince(from)
}

// check fails the test on any 500 (or other 5xx than 503), and returns a
// count of the statuses for the log.
func (p *tpPoller) check(t *testing.T) string {
	t.Helper()
	counts := map[int]int{}
	for _, r := range p.all() {
		counts[r.code]++
		if r.code >= 500 && r.code != http.StatusServiceUnavailable {
			t.Errorf("a %d at %s: %s", r.code, r.at.Format("15:04:05.000"), r.body)
		}
	}
	codes := make([]int, 0, len(counts))
	for c := range counts {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var b strings.Builder
	for _, c := range codes {
		fmt.Fprintf(&b, " %d×%d", counts[c], c)
	}
	return strings.TrimSpace(b.String())
}

// notOKAfter returns the replies other than 200 sent after from.
// tpSettled is how many answers 200 in a row show that limitd follows the
// new master (the poller asks every tpPollEvery).
const tpSettled = 10

// waitSettled waits (at most within) for tpSettled answers 200 in a row
// after from, and returns when the last of them came.
func (p *tpPoller) waitSettled(from time.Time, within time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		run := 0
		for _, r := range p.all() {
			switch {
			case r.at.Before(from):
			case r.code == http.StatusOK:
				if run++; run == tpSettled {
					return r.at, true
				}
			default:
				run = 0
			}
		}
		time.Sleep(tpPollEvery)
	}
	return time.Time{}, false
}

func (p *tpPoller) notOKAfter(from time.Time) []tpReply {
	var out []tpReply
	for _, r := range p.all() {
		if r.at.After(from) && r.code != http.StatusOK {
			out = append(out, r)
		}
	}
	return out
}

// (a) A cluster master is killed while limitd serves acquires on its slot:
// its replica takes over after the node timeout, and limitd answers again
// within tpRecoverWithin of the promotion, without a restart and without a
// single 500.
func TestTopologyClusterMasterKilled(t *testing.T) {
	longTest(t)
	ctx := context.Background()
	cl := redistest.ClusterWithReplicas(t)
	p := tpServe(t, tpClusterURL(cl), tpBoot)
	poll := tpPoll(t, p.base, "orders")
	if _, ok := poll.waitOK(time.Now(), 5*time.Second); !ok {
		t.Fatalf("no 200 before the fault: %s", poll.check(t))
	}
	time.Sleep(500 * time.Millisecond)

	old := cl.MasterOf(ctx, "{orders}")
	if old == nil {
		t.Fatal("no master owns {orders}")
	}
	old.Stop()
	killed := time.Now()
	m, promoted := cl.WaitNewMaster("{orders}", old, 20*time.Second)
	back, ok := poll.waitOK(promoted, 3*tpRecoverWithin)
	time.Sleep(time.Second) // and it stays up
	poll.halt()
	statuses := poll.check(t)
	t.Logf("killed master %s of {orders}; %s promoted %v after the kill; statuses: %s",
		old.Addr(), m.Addr(), promoted.Sub(killed).Round(time.Millisecond), statuses)
	if !ok {
		t.Fatalf("no 200 within %v of the promotion", 3*tpRecoverWithin)
	}
	t.Logf("RECOVERY cluster master killed: acquire 200 again %v after the promotion (%v after the kill)",
		max(0, back.Sub(promoted)).Round(time.Millisecond), back.Sub(killed).Round(time.Millisecond))
	if d := back.Sub(promoted); d > tpRecoverWithin {
		t.Errorf("acquire answered 200 only %v after the promotion, want within %v", d, tpRecoverWithin)
	}
	if bad := poll.notOKAfter(back); len(bad) > 0 {
		t.Errorf("after recovering, %d answers were not 200, first: %d %s", len(bad), bad[0].code, bad[0].body)
	}

	// The old master comes back as it was (empty, its nodes.conf saying it
	// masters the slots): the cluster makes it a replica of the new master;
	// limitd keeps answering and writes nothing to it meanwhile.
	poll = tpPoll(t, p.base, "orders")
	old.Start()
	returned := time.Now()
	oc := redis.NewClient(&redis.Options{Addr: old.Addr()})
	defer oc.Close()
	var demoted time.Time
	for time.Since(returned) < 15*time.Second {
		role := old.Role(ctx)
		if role == "master" {
			if n, err := oc.DBSize(ctx).Result(); err == nil && n > 0 && old.Role(ctx) == "master" {
				keys, _ := oc.Keys(ctx, "*").Result()
				t.Fatalf("a write landed on the old master while it was master again: %v", keys)
			}
		}
		if role == "slave" {
			demoted = time.Now()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	poll.halt()
	statuses = poll.check(t)
	if demoted.IsZero() {
		t.Fatalf("the old master was not a replica within 15s of its return")
	}
	t.Logf("old master back: a replica %v after its return; acquire statuses meanwhile: %s",
		demoted.Sub(returned).Round(time.Millisecond), statuses)
	if bad := poll.notOKAfter(time.Time{}); len(bad) > 0 {
		t.Errorf("while the old master returned, %d answers were not 200, first: %d %s", len(bad), bad[0].code, bad[0].body)
	}
}

// (b) The cluster shards holding orders and the index restart empty (within
// the node timeout, so no failover): the boot file's limiters come back on
// them, answer acquire and are listed again within a few seconds.
func TestTopologyClusterShardRestartedEmpty(t *testing.T) {
	longTest(t)
	ctx := context.Background()
	cl := redistest.Cluster(t)
	p := tpServe(t, strings.Join(cl.Addrs(), ","), tpBoot)
	poll := tpPoll(t, p.base, "orders")
	if _, ok := poll.waitOK(time.Now(), 5*time.Second); !ok {
		t.Fatalf("no 200 before the fault: %s", poll.check(t))
	}
	time.Sleep(500 * time.Millisecond)

	var lost []*redistest.Instance
	for _, key := range []string{"{orders}", "limitd:index"} {
		if m := cl.MasterOf(ctx, key); m != nil && !slices.Contains(lost, m) {
			lost = append(lost, m)
		}
	}
	for _, m := range lost {
		m.Restart()
	}
	restarted := time.Now()
	onShards := 0
	for _, m := range lost {
		n, err := m.Client().DBSize(ctx).Result()
		if err != nil || n > 0 {
			t.Logf("%s after restart: %d keys, %v", m.Addr(), n, err)
		}
		onShards++
	}

	// Every boot limiter answers acquire and is listed again.
	var recovered time.Time
	deadline := restarted.Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if msg := tpAllBack(p); msg == "" {
			recovered = time.Now()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	poll.halt()
	statuses := poll.check(t)
	t.Logf("restarted %d master(s) empty; orders polled: %s", onShards, statuses)
	if recovered.IsZero() {
		t.Fatalf("boot limiters not back within 15s of the restart: %s", tpAllBack(p))
	}
	back, _ := poll.okSince(restarted)
	t.Logf("RECOVERY cluster shard restarted empty: orders acquire 200 again %v after the restart; every boot limiter acquirable and listed %v after it",
		back.Sub(restarted).Round(time.Millisecond), recovered.Sub(restarted).Round(time.Millisecond))
	if d := recovered.Sub(restarted); d > tpRecoverWithin {
		t.Errorf("boot limiters back only %v after the restart, want within %v", d, tpRecoverWithin)
	}
}

// tpAllBack says what of the boot file is missing through the API, or "".
func tpAllBack(p *svProc) string {
	client := &http.Client{Timeout: 3 * time.Second}
	for _, name := range tpBootNames {
		resp, err := client.Post(p.base+"/v1/limiters/"+name+"/acquire", "application/json", strings.NewReader(`{}`))
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("acquire %s = %d", name, resp.StatusCode)
		}
	}
	resp, err := client.Get(p.base + "/v1/limiters?limit=1000")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var list struct {
		Limiters []struct {
			Name string `json:"name"`
		} `json:"limiters"`
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("GET /v1/limiters = %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return err.Error()
	}
	var listed []string
	for _, l := range list.Limiters {
		listed = append(listed, l.Name)
	}
	for _, name := range tpBootNames {
		if !slices.Contains(listed, name) {
			return fmt.Sprintf("%s not listed (listed: %v)", name, listed)
		}
	}
	return ""
}

// (c) Sentinel: the master is killed, the replica promoted; limitd follows
// within tpRecoverWithin of the promotion. Then the old master comes back as
// it was (a master, empty) until the Sentinel demotes it: limitd writes
// nothing to it, never connects to it, and keeps answering 200.
func TestTopologySentinelFailover(t *testing.T) {
	longTest(t)
	ctx := context.Background()
	m := redistest.Server(t, "--repl-diskless-sync-delay", "0")
	r := redistest.Replica(t, m)
	s := redistest.Sentinel(t, m, 1)
	const clientName = "limitd-topology"
	p := tpServe(t, s.URL("&client_name="+clientName), tpBoot)
	poll := tpPoll(t, p.base, "orders")
	if _, ok := poll.waitOK(time.Now(), tpHang); !ok {
		t.Fatalf("no 200 before the fault: %s", poll.check(t))
	}
	time.Sleep(500 * time.Millisecond)

	m.Stop()
	killed := time.Now()
	addr, promoted := s.WaitPromotion(m.Addr(), tpHang)
	if addr != r.Addr() {
		t.Fatalf("Sentinel promoted %s, want the replica %s", addr, r.Addr())
	}
	back, ok := poll.waitOK(promoted, tpHang)
	if !ok {
		t.Fatalf("no 200 within %v of the promotion: %s", tpHang, poll.check(t))
	}
	// How soon is measured, not asserted: a busy machine delays the
	// Sentinel, the processes and the poller alike (docs/reliability.md has
	// the figures of quiet runs).
	t.Logf("RECOVERY Sentinel failover: promoted %v after the kill; acquire 200 again %v after the promotion",
		promoted.Sub(killed).Round(time.Millisecond), max(0, back.Sub(promoted)).Round(time.Millisecond))

	// The old master returns, empty and believing it is the master, until
	// the Sentinel turns it into a replica (within its 10 s INFO period).
	m.Start()
	returned := time.Now()
	old := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer old.Close()
	var demoted time.Time
	for time.Since(returned) < tpHang {
		role := m.Role(ctx)
		if role == "master" {
			// Once demoted it syncs the new master's keys: a key seen
			// while it was still a master is limitd's only if it is still
			// a master after the look.
			if n, err := old.DBSize(ctx).Result(); err == nil && n > 0 && m.Role(ctx) == "master" {
				keys, _ := old.Keys(ctx, "*").Result()
				t.Fatalf("limitd wrote to the old master while it was master again: %v", keys)
			}
		}
		if list, err := old.ClientList(ctx).Result(); err == nil && strings.Contains(list, "name="+clientName) {
			t.Fatalf("limitd connected to the old master (role %s):\n%s", role, list)
		}
		if role == "slave" {
			demoted = time.Now()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if demoted.IsZero() {
		t.Fatalf("the old master was not demoted within %v of its return", tpHang)
	}
	time.Sleep(time.Second) // limitd keeps answering on the new master
	poll.halt()
	statuses := poll.check(t)
	t.Logf("old master back as master for %v, then demoted; limitd never connected to it; statuses: %s",
		demoted.Sub(returned).Round(time.Millisecond), statuses)
	if bad := poll.notOKAfter(back); len(bad) > 0 {
		t.Errorf("after recovering, %d answers were not 200, first: %d %s", len(bad), bad[0].code, bad[0].body)
	}
	if list, err := old.ClientList(ctx).Result(); err == nil && strings.Contains(list, "name="+clientName) {
		t.Errorf("limitd connected to the demoted master:\n%s", list)
	}

	// A manual failover demotes a master that stays up, with limitd's
	// connections open to it: limitd follows (the Sentinel's +switch-master,
	// or READONLY) and writes to the new master only.
	m.WaitSynced(tpHang) // else a failover to it loses the data
	poll = tpPoll(t, p.base, "orders")
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer sc.Close()
	deadline := time.Now().Add(tpHang)
	for {
		err := sc.Failover(ctx, s.MasterName()).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SENTINEL FAILOVER refused for %v: %v", tpHang, err)
		}
		time.Sleep(200 * time.Millisecond) // NOGOODSLAVE until the Sentinel saw the replica in sync
	}
	switched := time.Now()
	addr2, promoted2 := s.WaitPromotion(r.Addr(), tpHang)
	// limitd has followed once it answers tpSettled 200s in a row after the
	// promotion, and it still answers 200 at the end, two seconds later (a
	// connection to the old master may answer READONLY in between, until
	// the Sentinel has turned it into a replica: that is a 503, never a 500).
	_, ok = poll.waitSettled(promoted2, tpHang)
	if ok {
		time.Sleep(2 * time.Second)
	}
	poll.halt()
	statuses = poll.check(t)
	if !ok {
		t.Fatalf("no run of %d answers 200 within %v of the manual failover to %s: %s", tpSettled, tpHang, addr2, statuses)
	}
	var lastBad time.Time
	for _, rep := range poll.all() {
		if rep.code != http.StatusOK {
			lastBad = rep.at
		}
	}
	t.Logf("RECOVERY Sentinel manual failover (old master stays up): %s promoted %v after SENTINEL FAILOVER; last non-200 %v after the promotion; statuses: %s",
		addr2, promoted2.Sub(switched).Round(time.Millisecond), max(0, lastBad.Sub(promoted2)).Round(time.Millisecond), statuses)
	all := poll.all()
	for _, rep := range all[max(0, len(all)-tpSettled):] {
		if rep.code != http.StatusOK {
			t.Errorf("limitd does not keep to the new master: the last answers after the manual failover include %d %s", rep.code, rep.body)
			break
		}
	}
}

// (d) Several limitd bench processes on one limiter (strict, 2,000/s) through
// a cluster failover and through an empty restart of the limiter's shard:
// count the permits by scheduled time in a 10 s window around the fault
// against the configured rate. The failover window itself loses permits (no
// one can be granted while the shard is down, and an empty restart starts a
// new schedule): the measure is what was granted beyond the rate over the
// part of the window the schedule covered, and the slots granted twice.
//
// Three fleets run side by side on three limiters of the same shard:
//   - direct: three processes × 4 workers in --mode direct (one script call
//     per permit: only the shared schedule grants) at 2,000/s; held to the
//     goal.
//   - queued: three processes × 64 workers in --mode direct at 50/s, so that
//     the schedule runs seconds ahead of the clock (callers told to wait
//     their turn), longer than the outage: what an empty restart forgets is
//     then permits already granted for the future. Held to the goal, which
//     needs the schedule floor.
//   - pool: two processes × 4 workers in --mode pool (the client's pools),
//     reported only: while Redis is unreachable they grant from their local
//     fallback (FallbackSafe, by design), and their log does not tell those
//     permits from the shared ones.
func TestTopologyOverAllocation(t *testing.T) {
	longTest(t)
	bin := svBinary(t)
	for _, fault := range []string{"failover", "empty-restart"} {
		t.Run(fault, func(t *testing.T) {
			ctx := context.Background()
			var cl *redistest.ClusterInstance
			if fault == "failover" {
				cl = redistest.ClusterWithReplicas(t)
			} else {
				cl = redistest.Cluster(t)
			}
			// Three limiters on one shard.
			direct, pool, queued := "ovd", "", ""
			shard := cl.MasterOf(ctx, "{"+direct+"}")
			for i := 0; pool == "" || queued == ""; i++ {
				if n := fmt.Sprintf("ov%d", i); cl.MasterOf(ctx, "{"+n+"}") == shard {
					if pool == "" {
						pool = n
					} else {
						queued = n
					}
				}
			}
			boot := fmt.Sprintf("limiters:\n  %s: {rate: 2000, burst: 1}\n  %s: {rate: 2000, burst: 1}\n  %s: {rate: 50, burst: 1}\n",
				direct, pool, queued)
			url := tpClusterURL(cl)
			p := tpServe(t, url, boot)
			const run = 16 * time.Second
			fleets := map[string][]*mpProc{
				"direct": mpFleet(t, bin, fault+"-direct", 3, "--redis", url, "--limiter", direct,
					"--workers", "4", "--duration", run.String(), "--mode", "direct"),
				"pool": mpFleet(t, bin, fault+"-pool", 2, "--redis", url, "--limiter", pool,
					"--workers", "4", "--duration", run.String(), "--mode", "pool"),
				// 192 callers waiting their turn at 50/s: the schedule runs
				// 3.84 s ahead of the clock, longer than the outage, so an
				// empty restart that starts a new schedule at "now" grants
				// again what was already granted, unless a floor stops it.
				"queued": mpFleet(t, bin, fault+"-queued", 3, "--redis", url, "--limiter", queued,
					"--workers", "64", "--duration", run.String(), "--mode", "direct"),
			}
			rates := map[string]float64{"direct": 2000, "pool": 2000, "queued": 50}
			time.Sleep(3 * time.Second)
			// A process protects only what it has seen: one that a busy
			// machine started late, and that holds no slot yet when the
			// fault comes, brings no floor. So the fault waits until the
			// queued limiter runs 3 s ahead: 150 of the 192 callers hold
			// a slot, more than two processes' 128, so every process has
			// seen the schedule.
			tpAhead(t, p, queued, 3*time.Second, 30*time.Second)

			var f int64
			if fault == "failover" {
				shard.Stop()
				f = mpRedisNow(time.Now())
				m, promoted := cl.WaitNewMaster("{"+direct+"}", shard, 20*time.Second)
				t.Logf("killed %s; %s promoted %v later", shard.Addr(), m.Addr(), time.Duration(mpRedisNow(promoted)-f).Round(time.Millisecond))
			} else {
				shard.Restart()
				f = mpRedisNow(time.Now())
			}
			lo, hi := f-int64(3*time.Second), f+int64(7*time.Second)

			for _, mode := range []string{"direct", "pool", "queued"} {
				rate := rates[mode]
				slice := int64(1e9 / rate)
				ps := fleets[mode]
				res := mpWait(t, ps, run+mpExitSlack+5*time.Second)
				logs := mpLogs(t, ps, res)
				var fallback int
				for _, p := range ps {
					var n int
					if _, err := fmt.Sscanf(tpAfter(p.stderr.String(), "limitd bench: "), "%d permits came from the client's local fallback", &n); err == nil {
						fallback += n
					}
				}
				o := tpOverAllocation(logs, lo, hi, rate, slice)
				window := rate * float64(hi-lo) / 1e9
				if mode == "pool" {
					// The log does not mark the fallback's permits, which
					// fill the outage: only the raw count of the shared
					// ones can be told, and a loss in the outage may hide
					// a double grant in it, so it is reported, not held.
					shared := o.permits - fallback
					t.Logf("OVERALLOC %s pool: %d permits scheduled in the 10 s window, %d of them from the clients' local fallback while Redis was unreachable; the %d shared ones are %+.3f%% of the rate's %.0f",
						fault, o.permits, fallback, shared, 100*(float64(shared)/window-1), window)
					continue
				}
				over := float64(o.permits) - o.expected
				pct := 100 * over / window
				t.Logf("OVERALLOC %s %s: %d permits scheduled in the 10 s window, %.0f at the rate over the %.3f s the schedule covered (holes %.3f s): %+.0f permits, %+.3f%% of the window's %.0f; %d slots granted twice (permits less than half a slice apart)",
					fault, mode, o.permits, o.expected, float64(hi-lo-o.holes)/1e9, float64(o.holes)/1e9, over, pct, window, o.doubles)
				if pct > 1 || o.doubles > int(window/100) {
					t.Errorf("%s, %s: %+.3f%% granted beyond the rate and %d slots granted twice, want ≤ 1%%", fault, mode, pct, o.doubles)
					tpLogDoubles(t, logs, f, lo, hi, slice)
				}
			}
			if s := p.stderr.String(); strings.Contains(s, "status=500") {
				t.Errorf("limitd logged a 500")
			}
		})
	}
}

// tpAhead waits, for at most limit, until a new caller of limiter name would
// wait at least ahead (GET /v1/limiters/{name}/wait), and fails t if it
// does not.
func tpAhead(t *testing.T, p *svProc, name string, ahead, limit time.Duration) {
	t.Helper()
	var w struct {
		Delay int64 `json:"delay_ns"`
	}
	for deadline := time.Now().Add(limit); ; time.Sleep(50 * time.Millisecond) {
		p.json("GET", "/v1/limiters/"+name+"/wait", "", "", http.StatusOK, &w)
		if w.Delay >= int64(ahead) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("limiter %s: a new caller would wait %v after %v, want at least %v: its callers are not all queued", name, time.Duration(w.Delay), limit, ahead)
		}
	}
}

// tpAfter returns s from the first occurrence of sep on, without sep ("" if
// none).
func tpAfter(s, sep string) string {
	_, after, ok := strings.Cut(s, sep)
	if !ok {
		return ""
	}
	return after
}

// tpOver is what a window of merged scheduled times holds.
type tpOver struct {
	permits  int     // scheduled in [lo, hi)
	holes    int64   // ns of the window with no permit scheduled for over 10 slices
	expected float64 // permits the rate allows over the rest of the window
	doubles  int     // consecutive scheduled times less than half a slice apart
}

func tpOverAllocation(logs [][]mpPermit, lo, hi int64, rate float64, slice int64) tpOver {
	s := mpSortedSched(logs, lo, hi)
	o := tpOver{permits: len(s)}
	prev := lo
	for _, x := range append(s, hi) {
		if d := x - prev; d > 10*slice {
			o.holes += d
		} else if x != hi && prev != lo && d < slice/2 {
			o.doubles++
		}
		prev = x
	}
	o.expected = rate * float64(hi-lo-o.holes) / 1e9
	return o
}

// limitd bench takes every form of LIMITD_REDIS_URL.
func TestTopologyBenchURLForms(t *testing.T) {
	longTest(t)
	bin := svBinary(t)
	m := redistest.Server(t)
	// Set after the start: redistest's readiness probe speaks without AUTH.
	if err := m.Client().ConfigSet(context.Background(), "requirepass", "s3cret-pw").Err(); err != nil {
		t.Fatal(err)
	}
	cl := redistest.Cluster(t)
	sm := redistest.Server(t)
	redistest.Replica(t, sm)
	s := redistest.Sentinel(t, sm, 1)
	forms := map[string]string{
		"single":       "redis://:s3cret-pw@" + m.Addr() + "/1",
		"cluster-url":  tpClusterURL(cl),
		"cluster-list": strings.Join(cl.Addrs(), ","),
		"sentinel":     s.URL(""),
	}
	var ps []*mpProc
	var names []string
	for name, url := range forms {
		names = append(names, name)
		ps = append(ps, mpStart(t, bin, "url-"+name, "--redis", url, "--limiter", "url-"+name,
			"--create", "1000,1", "--workers", "2", "--duration", "1s"))
	}
	res := mpWait(t, ps, time.Second+mpExitSlack)
	for i, r := range res {
		if r.Permits == 0 || r.Errors != 0 {
			t.Errorf("%s (%s): %d permits, %d errors", names[i], ps[i].name, r.Permits, r.Errors)
		}
	}
	// A wrong password is refused, and the error does not show it.
	p := mpStart(t, bin, "url-badpw", "--redis", "redis://:wrong-pw-123@"+m.Addr(), "--limiter", "x", "--create", "10", "--duration", "1s")
	<-p.done
	if p.waitErr == nil || strings.Contains(p.stderr.String()+p.stdout.String(), "wrong-pw-123") {
		t.Errorf("bench with a wrong password: %v, output %q %q", p.waitErr, p.stdout.String(), p.stderr.String())
	}
	p = mpStart(t, bin, "url-badurl", "--redis", "redis://:wrong-pw-123@"+m.Addr()+"?addr=x", "--limiter", "x", "--duration", "1s")
	<-p.done
	if p.waitErr == nil || strings.Contains(p.stderr.String()+p.stdout.String(), "wrong-pw-123") {
		t.Errorf("bench with a bad URL: %v, output %q %q", p.waitErr, p.stdout.String(), p.stderr.String())
	}
	t.Logf("bad URL: %s", strings.TrimSpace(p.stderr.String()))
}

// tpLogDoubles logs the slots granted twice: which processes took them and
// when they were scheduled, relative to the fault f.
func tpLogDoubles(t *testing.T, logs [][]mpPermit, f, lo, hi, slice int64) {
	t.Helper()
	type permit struct {
		proc         int
		sched, start int64
	}
	var all []permit
	for i, l := range logs {
		for _, p := range l {
			if p.sched >= lo && p.sched < hi {
				all = append(all, permit{i, p.sched, p.start})
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].sched < all[j].sched })
	var b strings.Builder
	for i := 1; i < len(all); i++ {
		if a, z := all[i-1], all[i]; z.sched-a.sched < slice/2 {
			fmt.Fprintf(&b, "\n  process %d at %+v (started %+v) and process %d at %+v (started %+v)",
				a.proc, time.Duration(a.sched-f), time.Duration(a.start-f), z.proc, time.Duration(z.sched-f), time.Duration(z.start-f))
		}
	}
	t.Logf("slots granted twice, scheduled (and started) relative to the fault:%s", b.String())
}
